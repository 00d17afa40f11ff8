"""What the RoPE benchmark (:mod:`benchmarks.rope`) compares: the implementations and their
factories, the clone limit, the float64 reference written from the formula, and the check of
every output (and gradient) against it. The module docstring of :mod:`benchmarks.rope`
describes each implementation and why it is set up as it is."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import Tensor

__all__ = ["DTYPES", "IMPLEMENTATIONS", "Implementation", "check_tolerance", "reference_rope"]

Layout = Literal["half", "interleaved"]
Shape = tuple[int, int, int, int]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
CLONE = "clone"
#: Copying into preallocated outputs: the bandwidth limit without the page faults of fresh
#: allocations (forward only). Shown for scale; ratios stay against ``clone``, which pays for
#: its outputs as every out-of-place implementation does.
COPY = "copy_ (preallocated)"
TRANSFORMERS = "transformers"
#: A group's clone may differ from the scaling run's clone of the same tensors by this factor
#: before the group is flagged (the same operation, timed a little later in the same process).
CLONE_CONSISTENCY = 2.0


def _shape_str(shape: Shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


# ---------------------------------------------------------------------------------------
# The float64 reference (the formula, written independently of every implementation)


def reference_rope(x: Tensor, positions: Tensor, base: float, layout: Layout) -> Tensor:
    """RoPE from the formula in float64: pairs of channels rotated by ``position * base^(-2i/dh)``.

    Args:
        x: ``(b h t dh)``.
        positions: ``(t,)`` positions (negate them to rotate backwards, i.e. the gradient).
        base: the RoPE base.
        layout: ``"half"`` pairs channel ``i`` with ``i + dh/2`` (GPT-NeoX, Llama in
            transformers); ``"interleaved"`` pairs ``2i`` with ``2i+1`` (GPT-J, Meta Llama).

    Returns:
        ``(b h t dh)`` in float64.
    """
    x = x.double()
    dh = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    angle = positions.double()[:, None] * inv_freq  # (t, dh/2)
    cos, sin = angle.cos(), angle.sin()
    if layout == "half":
        x1, x2 = x[..., : dh // 2], x[..., dh // 2 :]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)


def check_tolerance(dtype: torch.dtype, max_position: int) -> float:
    """Allowed ``max|out - ref| / max|ref|`` of an implementation against :func:`reference_rope`.

    Two parts: the rounding of the output dtype (a few ulps), and the angles, which every
    implementation computes in float32 as ``position * inv_freq`` (relative error a few
    ``2^-24``, so an absolute angle error growing with the position). A wrong layout, sign or
    frequency gives errors of order 1, far above this.
    """
    return 8 * torch.finfo(dtype).eps + 8 * 2.0**-24 * max(max_position, 1)


# ---------------------------------------------------------------------------------------
# Implementations: one instance per head_dim and dtype, reused across lengths (as in a model)


@dataclasses.dataclass
class Implementation:
    """One RoPE implementation: its layout, how to build it, and whether it may be compiled."""

    name: str
    layout: Layout
    # (head_dim, dtype, base, max_len) -> apply(q, k) -> (q', k') for any length <= max_len
    factory: Callable[[int, torch.dtype, float, int], Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]]
    compile: bool
    fullgraph: bool = False
    note: str = ""


def _posenc_factory(layout: Layout):
    def factory(head_dim: int, dtype: torch.dtype, base: float, max_len: int):
        import posenc

        rope = posenc.RoPE(head_dim, base=base, layout=layout)
        return rope.encode_qk

    return factory


def _posenc_prepared_factory(layout: Layout):
    def factory(head_dim: int, dtype: torch.dtype, base: float, max_len: int):
        import posenc

        rope = posenc.RoPE(head_dim, base=base, layout=layout)
        states: dict[int, Any] = {}

        def apply(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
            # Prepared once per length, as a model prepares once per forward; only the first
            # (untimed) call of a length pays for it.
            t = q.shape[-2]
            if t not in states:
                states[t] = rope.prepare(t)
            return states[t].encode_qk(q, k)

        return apply

    return factory


def _transformers_factory(head_dim: int, dtype: torch.dtype, base: float, max_len: int):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = LlamaConfig(
        hidden_size=8 * head_dim,
        num_attention_heads=8,
        head_dim=head_dim,
        max_position_embeddings=max_len,
        rope_parameters={"rope_type": "default", "rope_theta": base},
    )
    rotary = LlamaRotaryEmbedding(config)
    # As the model does: cos/sin once per forward, in the input dtype, shared by every layer.
    cos, sin = rotary(torch.empty(0, dtype=dtype), torch.arange(max_len)[None])

    def apply(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        t = q.shape[-2]
        return apply_rotary_pos_emb(q, k, cos[:, :t], sin[:, :t])

    return apply


def _rotary_embedding_torch_factory(head_dim: int, dtype: torch.dtype, base: float, max_len: int):
    from rotary_embedding_torch import RotaryEmbedding

    rotary = RotaryEmbedding(dim=head_dim, theta=base, cache_max_seq_len=max(max_len, 8192))

    def apply(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return rotary.rotate_queries_or_keys(q), rotary.rotate_queries_or_keys(k)

    return apply


def _complex_factory(head_dim: int, dtype: torch.dtype, base: float, max_len: int):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angle = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)
    freqs_cis = torch.polar(torch.ones_like(angle), angle)  # (t, dh/2) complex64, computed once

    def rotate(x: Tensor) -> Tensor:
        # Meta Llama: channel pairs (2i, 2i+1) as complex numbers, multiplied by e^{i theta}.
        x_complex = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(x_complex * freqs_cis[: x.shape[-2]]).flatten(-2).type_as(x)

    def apply(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return rotate(q), rotate(k)

    return apply


_PREPARED_NOTE = (
    "state = RoPE.prepare(t) outside the timed region (once per forward in a model, like "
    "transformers' cos/sin), state.encode_qk(q, k) timed; carries the eager targets; not compiled"
)
_UNPREPARED_NOTE = (
    "RoPE.encode_qk(q, k) timed with nothing prepared (positions, cos/sin rows and their "
    "apply-ready form on every call); shown, not judged, in eager mode; the compiled posenc rows"
)

IMPLEMENTATIONS: dict[str, Implementation] = {
    impl.name: impl
    for impl in (
        Implementation(
            "posenc half",
            "half",
            _posenc_prepared_factory("half"),
            compile=False,
            note=_PREPARED_NOTE,
        ),
        Implementation(
            "posenc interleaved",
            "interleaved",
            _posenc_prepared_factory("interleaved"),
            compile=False,
            note=_PREPARED_NOTE,
        ),
        Implementation(
            "posenc half, unprepared",
            "half",
            _posenc_factory("half"),
            compile=True,
            fullgraph=True,
            note=_UNPREPARED_NOTE,
        ),
        Implementation(
            "posenc interleaved, unprepared",
            "interleaved",
            _posenc_factory("interleaved"),
            compile=True,
            fullgraph=True,
            note=_UNPREPARED_NOTE,
        ),
        Implementation(
            TRANSFORMERS,
            "half",
            _transformers_factory,
            compile=True,
            note="Llama apply_rotary_pos_emb; cos/sin precomputed by LlamaRotaryEmbedding, apply timed",
        ),
        Implementation(
            "rotary-embedding-torch",
            "interleaved",
            _rotary_embedding_torch_factory,
            compile=False,
            note="rotate_queries_or_keys on q and k; not compiled (it recompiles for every length)",
        ),
        Implementation(
            "complex multiply",
            "interleaved",
            _complex_factory,
            compile=False,
            note="Meta Llama view_as_complex x freqs_cis (freqs_cis precomputed), written in the benchmark; "
            "not compiled (inductor has no code generation for complex operators and falls back)",
        ),
    )
}


class _CopyBoth(torch.autograd.Function):
    """The memory limit of forward+backward: copy q and k forward, copy their gradients back."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return q.clone(), k.clone()

    @staticmethod
    def backward(ctx, grad_q: Tensor, grad_k: Tensor) -> tuple[Tensor, Tensor]:
        return grad_q.clone(), grad_k.clone()


def _clone_limit(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    if q.requires_grad or k.requires_grad:
        return _CopyBoth.apply(q, k)
    return q.clone(), k.clone()


def _step(apply: Callable, q: Tensor, k: Tensor, grads: tuple[Tensor, Tensor] | None) -> Callable[[], object]:
    """The timed callable: forward only, or forward then the gradients w.r.t. q and k."""
    if grads is None:
        return lambda: apply(q, k)

    def forward_backward():
        out_q, out_k = apply(q, k)
        return torch.autograd.grad((out_q, out_k), (q, k), grads)

    return forward_backward


def _relative_error(out: Tensor, ref: Tensor) -> float:
    return float((out.detach().double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def _check(
    apply: Callable, layout: Layout, q: Tensor, k: Tensor, grads: tuple[Tensor, Tensor] | None, base: float
) -> float:
    """The largest relative error of outputs (and gradients) against :func:`reference_rope`."""
    positions = torch.arange(q.shape[-2])
    out_q, out_k = apply(q, k)
    errors = [
        _relative_error(out_q, reference_rope(q.detach(), positions, base, layout)),
        _relative_error(out_k, reference_rope(k.detach(), positions, base, layout)),
    ]
    if grads is not None:
        grad_q, grad_k = torch.autograd.grad((out_q, out_k), (q, k), grads)
        # The gradient of a rotation by theta is the rotation of the output gradient by -theta.
        errors.append(_relative_error(grad_q, reference_rope(grads[0], -positions, base, layout)))
        errors.append(_relative_error(grad_k, reference_rope(grads[1], -positions, base, layout)))
    return max(errors)
