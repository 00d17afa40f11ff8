"""``python -m benchmarks --device cuda``: RoPE on a GPU, timed with CUDA events.

posenc's eager RoPE (``RoPE.prepare`` once per length, as a model does, then ``encode_qk``)
against transformers' ``apply_rotary_pos_emb`` (cos/sin from ``LlamaRotaryEmbedding`` once, in the
input dtype), and Liger-Kernel's Triton rope when it is installed (else the row says skipped).
Each time is the median of CUDA-event timings after warm-up, reported beside a clone of q and k
(the memory-bound floor). Results go to ``benchmarks/results/cuda-<gpu>.md`` with the GPU, driver,
CUDA and torch versions.

Without a GPU the command says so and exits 2 (:func:`gpu_missing`): nothing is measured.
"""

from __future__ import annotations

import importlib.util
import re
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

__all__ = ["gpu_missing", "run"]

#: (b, h, t, dh) shapes and dtypes measured.
SHAPES = [(1, 32, 2048, 128), (4, 32, 8192, 128)]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
BASE = 10000.0


def gpu_missing() -> str | None:
    """Why no CUDA GPU can be used here, or ``None`` when one can."""
    if not torch.backends.cuda.is_built() or torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build: no CUDA support, so no GPU can be used"
    if not torch.cuda.is_available():
        return f"no CUDA GPU on this machine (torch {torch.__version__}, CUDA {torch.version.cuda} build)"
    return None


def _driver() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return out.stdout.strip().splitlines()[0] if out.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown (nvidia-smi not found)"


def time_cuda(fn: Callable[[], object], *, warmup: int = 5, repeats: int = 30) -> float:
    """Median milliseconds of ``fn`` timed with CUDA events (after ``warmup`` untimed calls)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _posenc(
    head_dim: int, dtype: torch.dtype, t: int, device: torch.device
) -> Callable[[Tensor, Tensor], Any]:
    import posenc

    state = posenc.RoPE(head_dim, base=BASE).to(device).prepare(t, device=device)
    return state.encode_qk


def _transformers(
    head_dim: int, dtype: torch.dtype, t: int, device: torch.device
) -> Callable[[Tensor, Tensor], Any]:
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = LlamaConfig(
        hidden_size=8 * head_dim,
        num_attention_heads=8,
        head_dim=head_dim,
        max_position_embeddings=t,
        rope_parameters={"rope_type": "default", "rope_theta": BASE},
    )
    rotary = LlamaRotaryEmbedding(config).to(device)
    cos, sin = rotary(torch.empty(0, dtype=dtype, device=device), torch.arange(t, device=device)[None])
    return lambda q, k: apply_rotary_pos_emb(q, k, cos, sin)


def _liger(
    head_dim: int, dtype: torch.dtype, t: int, device: torch.device
) -> Callable[[Tensor, Tensor], Any]:
    from liger_kernel.transformers.rope import liger_rotary_pos_emb  # type: ignore[import-not-found]

    inv_freq = BASE ** (-torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim)
    angles = torch.arange(t, device=device, dtype=torch.float64)[:, None] * inv_freq
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos().to(dtype)[None], emb.sin().to(dtype)[None]
    return lambda q, k: liger_rotary_pos_emb(q, k, cos, sin)


IMPLEMENTATIONS: dict[str, tuple[str | None, Callable[..., Callable[[Tensor, Tensor], Any]]]] = {
    "posenc RoPE (eager)": (None, _posenc),
    "transformers apply_rotary_pos_emb (eager)": ("transformers", _transformers),
    "Liger-Kernel liger_rotary_pos_emb": ("liger_kernel", _liger),
}


def run(out_dir: Path, log: Callable[[str], None] = print) -> Path:
    """Measure every implementation at every shape and dtype on ``cuda``; write and return the report."""
    device = torch.device("cuda")
    name = torch.cuda.get_device_name(device)
    lines = [
        "# RoPE on a GPU (q and k, forward), timed with CUDA events",
        "",
        f"- GPU: {name}; driver {_driver()}; CUDA {torch.version.cuda}; torch {torch.__version__}",
        "- time: median of 30 CUDA-event timings after 5 warm-up calls; ratio: time / clone of q and k",
        "",
        "| shape (b, h, t, dh) | dtype | implementation | ms | × clone |",
        "|---|---|---|---|---|",
    ]
    for shape in SHAPES:
        for dtype_name, dtype in DTYPES.items():
            q = torch.randn(shape, device=device, dtype=dtype)
            k = torch.randn(shape, device=device, dtype=dtype)
            clone = time_cuda(lambda q=q, k=k: (q.clone(), k.clone()))
            lines.append(f"| {shape} | {dtype_name} | clone of q and k | {clone:.3f} | 1.00 |")
            for label, (package, factory) in IMPLEMENTATIONS.items():
                if package is not None and importlib.util.find_spec(package) is None:
                    lines.append(f"| {shape} | {dtype_name} | {label} | skipped: {package} not installed | |")
                    continue
                apply = factory(shape[-1], dtype, shape[-2], device)
                ms = time_cuda(lambda apply=apply, q=q, k=k: apply(q, k))
                lines.append(f"| {shape} | {dtype_name} | {label} | {ms:.3f} | {ms / clone:.2f} |")
                log(lines[-1])
    if importlib.util.find_spec("flash_attn") is None:
        lines += ["", "flash-attn: skipped (not installed)."]
    else:
        lines += ["", "flash-attn is installed; its rotary kernel is not measured here yet."]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"cuda-{re.sub(r'[^A-Za-z0-9]+', '-', name).strip('-').lower()}.md"
    path.write_text("\n".join(lines) + "\n")
    return path
