"""What ``python -m benchmarks --device cuda`` measures (:mod:`benchmarks.cuda` runs and reports it).

RoPE, on ``(b, h, t, dh)`` q and k in the half (GPT-NeoX/Llama) layout, base 10000:

* ``posenc RoPE (eager)``: ``RoPE.prepare(t)`` once outside the timed region (as a model does
  once per forward), ``state.encode_qk(q, k)`` timed;
* ``posenc RoPE (compiled)``: ``torch.compile(fullgraph=True)`` of ``rope.encode_qk(q, k)``,
  nothing prepared (the compiled rows of the CPU suite): the rows computed in the graph;
* ``posenc RoPE (compiled, rows given)``: the compiled ``state.encode_qk(q, k)`` of a state
  prepared outside, whose rows are inputs of the graph, as in a compiled model's layers;
* ``transformers apply_rotary_pos_emb`` eager and compiled: cos/sin from ``LlamaRotaryEmbedding``
  once, in the input dtype, apply timed (the rows given);
* ``transformers rotary + apply (compiled, rows inside)``: ``LlamaRotaryEmbedding`` and the apply
  in one compiled function, the counterpart of posenc's compiled row;
* ``Liger-Kernel liger_rotary_pos_emb`` (Triton) and flash-attn's ``apply_rotary_emb`` (Triton,
  on the ``(b, t, h, dh)`` view of q and k, as flash-attn's models call it) when installed.

Causal attention with a position bias, on ``(b, h, t, dh)`` q, k, v: ALiBi, T5, KERPLE and FIRE
(``posenc.build(spec, causal=True)``) through every path of :func:`posenc.attention`
(``backend="auto"``, ``"sdpa"``, ``"chunked"``, ``"flex"``), against bias-free causal SDPA (the
ratio's denominator: the same attention with no position bias), SDPA forced onto its
FlashAttention kernel, flash-attn's ``flash_attn_func`` and, for ALiBi, flash-attn with its
``alibi_slopes`` when installed. The backward pass differentiates q, k, v and the encoding's
parameters (T5's table, KERPLE's two per head, FIRE's MLP).

Every builder returns a function of the inputs giving a tuple of outputs; the runner adds the
backward pass. Each output is checked against a reference path (posenc's eager RoPE; posenc's
``backend="sdpa"`` for a bias, whose dense bias is the formula): the report shows the largest
difference.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .rope import TARGET_SHAPES

__all__ = [
    "ATTENTION_SHAPES",
    "BIAS_SPECS",
    "CHUNK_ROWS",
    "CHUNK_SHAPES",
    "POSENC_BACKENDS",
    "ROPE_SHAPES",
    "Impl",
    "Skip",
    "attention_impls",
    "chunk_impls",
    "rope_impls",
]

Shape = tuple[int, int, int, int]
Apply = Callable[..., tuple[Tensor, ...]]

#: RoPE ``(b, h, t, dh)``: the CPU suite's target shapes and a long-context training batch.
ROPE_SHAPES: list[Shape] = [*TARGET_SHAPES, (4, 32, 8192, 128)]
#: Attention ``(b, h, t, dh)``.
ATTENTION_SHAPES: list[Shape] = [(1, 16, 2048, 64), (1, 16, 8192, 64)]
BIAS_SPECS = ("alibi", "t5", "kerple", "fire")
#: ``--cuda-only chunks``, what set ``posenc.attend.BIAS_BUDGET_BYTES["cuda"]``: bfloat16 (where
#: ``"auto"`` takes query chunks on a GPU; the Toeplitz view is for float32) at the attention shapes
#: and a training batch, each bias through the single call, ``"auto"`` and query chunks of these rows.
CHUNK_SHAPES: list[Shape] = [*ATTENTION_SHAPES, (4, 32, 4096, 128)]
CHUNK_ROWS = (512, 1024, 2048)
POSENC_BACKENDS = ("auto", "sdpa", "chunked", "flex")
BASE = 10000.0


class Skip(Exception):
    """Raised by a builder for a case its implementation does not support (the row says why)."""


def _gpu_only(device: torch.device, what: str) -> None:
    if device.type != "cuda":
        raise Skip(f"skipped: {what} runs on a CUDA GPU only")


def _half_only(dtype: torch.dtype, device: torch.device, what: str) -> None:
    if device.type == "cuda" and dtype not in (torch.float16, torch.bfloat16):
        raise Skip(f"skipped: {what} takes float16/bfloat16 only")


@dataclasses.dataclass(frozen=True)
class Impl:
    """One row of a table: how to build its function, and what it needs.

    ``build(shape, dtype, device, compile_backend)`` returns ``(apply, params)``: ``apply`` takes
    the inputs (q, k for RoPE; q, k, v for attention) and returns a tuple of outputs, ``params``
    the module parameters the backward pass differentiates besides the inputs.
    """

    label: str
    build: Callable[..., tuple[Apply, list[Tensor]]]
    requires: str | None = None  # a package: the row says skipped when it is not installed
    baseline: bool = False  # the denominator of the ratios in its group
    reference: bool = False  # the outputs the others are checked against
    compiled: bool = False

    def missing(self) -> str | None:
        """Why this row cannot run here (a package not installed), or ``None``."""
        if self.requires is not None and importlib.util.find_spec(self.requires) is None:
            return f"skipped: {self.requires} not installed"
        return None


def _compile(fn: Callable[..., Any], backend: str, **kwargs: Any) -> Callable[..., Any]:
    torch._dynamo.reset()  # each case compiles afresh: no recompile limit, no other case's guards
    return torch.compile(fn, backend=backend, **kwargs)


# ---------------------------------------------------------------------------------------------
# RoPE


def _posenc_rope(compiled: str | None) -> Callable[..., tuple[Apply, list[Tensor]]]:
    def build(
        shape: Shape, dtype: torch.dtype, device: torch.device, backend: str
    ) -> tuple[Apply, list[Tensor]]:
        import posenc

        rope = posenc.RoPE(shape[-1], base=BASE).to(device)
        if compiled == "rows inside":
            return _compile(lambda q, k: rope.encode_qk(q, k), backend, fullgraph=True), []
        state = rope.prepare(shape[-2], device=device)
        if compiled == "rows given":  # the prepared rows are inputs of the graph, as in a model's layers
            return _compile(lambda q, k: state.encode_qk(q, k), backend, fullgraph=True), []
        return state.encode_qk, []

    return build


def _llama_rotary(shape: Shape, device: torch.device) -> Any:
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    head_dim, t = shape[-1], shape[-2]
    config = LlamaConfig(
        hidden_size=8 * head_dim,
        num_attention_heads=8,
        head_dim=head_dim,
        max_position_embeddings=t,
        rope_parameters={"rope_type": "default", "rope_theta": BASE},
    )
    return LlamaRotaryEmbedding(config).to(device)


def _llama_cos_sin(shape: Shape, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    rotary = _llama_rotary(shape, device)
    return rotary(torch.empty(0, dtype=dtype, device=device), torch.arange(shape[-2], device=device)[None])


def _transformers_rope(compiled: str | None) -> Callable[..., tuple[Apply, list[Tensor]]]:
    def build(
        shape: Shape, dtype: torch.dtype, device: torch.device, backend: str
    ) -> tuple[Apply, list[Tensor]]:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        if compiled == "rows inside":
            rotary = _llama_rotary(shape, device)
            positions = torch.arange(shape[-2], device=device)[None]

            def rotate(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
                return apply_rotary_pos_emb(q, k, *rotary(q, positions))

            return _compile(rotate, backend), []
        cos, sin = _llama_cos_sin(shape, dtype, device)

        def apply(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
            return apply_rotary_pos_emb(q, k, cos, sin)

        return (_compile(apply, backend) if compiled else apply), []

    return build


def _liger_rope(
    shape: Shape, dtype: torch.dtype, device: torch.device, backend: str
) -> tuple[Apply, list[Tensor]]:
    _gpu_only(device, "Liger-Kernel's Triton kernel")
    from liger_kernel.transformers.rope import liger_rotary_pos_emb  # type: ignore[import-not-found]

    cos, sin = _llama_cos_sin(shape, dtype, device)
    return lambda q, k: liger_rotary_pos_emb(q, k, cos, sin), []


def _flash_attn_rope(
    shape: Shape, dtype: torch.dtype, device: torch.device, backend: str
) -> tuple[Apply, list[Tensor]]:
    _gpu_only(device, "flash-attn's Triton kernel")
    from flash_attn.layers.rotary import apply_rotary_emb  # type: ignore[import-not-found]

    head_dim, t = shape[-1], shape[-2]
    inv_freq = BASE ** (-torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim)
    angles = torch.arange(t, dtype=torch.float64, device=device)[:, None] * inv_freq  # (t, dh/2)
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)

    def apply(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        # flash-attn's layout is (b, t, h, dh): its models hold q and k so; the outputs are
        # transposed back as views (no copy) for the check against posenc
        q_out = apply_rotary_emb(q.transpose(1, 2), cos, sin, interleaved=False)
        k_out = apply_rotary_emb(k.transpose(1, 2), cos, sin, interleaved=False)
        return q_out.transpose(1, 2), k_out.transpose(1, 2)

    return apply, []


def rope_impls() -> list[Impl]:
    """The RoPE rows, the reference first."""
    return [
        Impl("posenc RoPE (eager)", _posenc_rope(None), reference=True),
        Impl("posenc RoPE (compiled)", _posenc_rope("rows inside"), compiled=True),
        Impl("posenc RoPE (compiled, rows given)", _posenc_rope("rows given"), compiled=True),
        Impl("transformers apply_rotary_pos_emb (eager)", _transformers_rope(None), requires="transformers"),
        Impl(
            "transformers apply_rotary_pos_emb (compiled)",
            _transformers_rope("rows given"),
            requires="transformers",
            compiled=True,
        ),
        Impl(
            "transformers rotary + apply (compiled, rows inside)",
            _transformers_rope("rows inside"),
            requires="transformers",
            compiled=True,
        ),
        Impl("Liger-Kernel liger_rotary_pos_emb", _liger_rope, requires="liger_kernel"),
        Impl("flash-attn apply_rotary_emb", _flash_attn_rope, requires="flash_attn"),
    ]


# ---------------------------------------------------------------------------------------------
# Causal attention with a position bias


def _sdpa(flash: bool) -> Callable[..., tuple[Apply, list[Tensor]]]:
    def build(
        shape: Shape, dtype: torch.dtype, device: torch.device, backend: str
    ) -> tuple[Apply, list[Tensor]]:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        if flash:
            _half_only(dtype, device, "SDPA's FlashAttention kernel")

        def apply(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor]:
            if not flash:
                return (F.scaled_dot_product_attention(q, k, v, is_causal=True),)
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return (F.scaled_dot_product_attention(q, k, v, is_causal=True),)

        return apply, []

    return build


def _flash_attn(slopes_of: str | None) -> Callable[..., tuple[Apply, list[Tensor]]]:
    def build(
        shape: Shape, dtype: torch.dtype, device: torch.device, backend: str
    ) -> tuple[Apply, list[Tensor]]:
        from flash_attn import flash_attn_func  # type: ignore[import-not-found]

        _half_only(dtype, device, "flash-attn")
        slopes = None
        if slopes_of is not None:
            import posenc

            slopes = posenc.build(slopes_of, num_heads=shape[1], causal=True).slopes.to(device, torch.float32)

        def apply(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor]:
            q, k, v = (x.transpose(1, 2) for x in (q, k, v))  # flash-attn's (b, t, h, dh)
            return (flash_attn_func(q, k, v, causal=True, alibi_slopes=slopes).transpose(1, 2),)

        return apply, []

    return build


def _posenc_attention(
    spec: str, backend_name: str, chunk_size: int | None = None
) -> Callable[..., tuple[Apply, list[Tensor]]]:
    def build(
        shape: Shape, dtype: torch.dtype, device: torch.device, backend: str
    ) -> tuple[Apply, list[Tensor]]:
        import posenc

        torch.manual_seed(0)  # the same encoding (T5 table, FIRE MLP) for every path of a spec
        encoding = posenc.build(spec, num_heads=shape[1], head_dim=shape[-1], causal=True).to(device)

        def apply(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor]:
            return (
                posenc.attention(q, k, v, encoding, causal=True, backend=backend_name, chunk_size=chunk_size),
            )

        return apply, [p for p in encoding.parameters() if p.requires_grad]

    return build


def attention_impls(
    specs: tuple[str, ...] = BIAS_SPECS, backends: tuple[str, ...] = POSENC_BACKENDS
) -> list[Impl]:
    """The attention rows: bias-free baselines, then each bias through each posenc path (the
    ``sdpa`` path first: the reference of its spec)."""
    rows = [
        Impl("SDPA causal, no bias", _sdpa(False), baseline=True),
        Impl("SDPA FlashAttention kernel, no bias", _sdpa(True)),
        Impl("flash-attn flash_attn_func, no bias", _flash_attn(None), requires="flash_attn"),
    ]
    ordered = sorted(backends, key=lambda b: b != "sdpa")
    for spec in specs:
        for backend_name in ordered:
            rows.append(
                Impl(
                    f"posenc {spec} [{backend_name}]",
                    _posenc_attention(spec, backend_name),
                    reference=backend_name == "sdpa",
                )
            )
        if spec == "alibi":
            rows.append(
                Impl("flash-attn flash_attn_func, alibi_slopes", _flash_attn("alibi"), requires="flash_attn")
            )
    return rows


def chunk_impls(specs: tuple[str, ...] = BIAS_SPECS, rows: tuple[int, ...] = CHUNK_ROWS) -> list[Impl]:
    """The ``chunks`` rows: bias-free causal SDPA (the baseline), then each bias through the single
    call (its reference), ``"auto"`` and query chunks of each of ``rows``."""
    impls = [Impl("SDPA causal, no bias", _sdpa(False), baseline=True)]
    for spec in specs:
        impls.append(Impl(f"posenc {spec} [sdpa]", _posenc_attention(spec, "sdpa"), reference=True))
        impls.append(Impl(f"posenc {spec} [auto]", _posenc_attention(spec, "auto")))
        for n in rows:
            impls.append(Impl(f"posenc {spec} [chunked, {n} rows]", _posenc_attention(spec, "chunked", n)))
    return impls
