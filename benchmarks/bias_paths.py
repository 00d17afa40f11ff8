"""What the bias benchmark (:mod:`benchmarks.bias`) compares: the attention paths (posenc, the
dense mask, x-transformers, transformers) built on one shared context, and the float64
reference on a sample of query rows. The module docstring of :mod:`benchmarks.bias` describes
each path."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["PATHS", "AttentionPath", "Context", "check_rows", "make_context", "reference_rows"]

BASELINE = "sdpa causal (no bias)"
POSENC_ALIBI = "posenc alibi"
POSENC_T5 = "posenc t5"
POSENC_T5_FLEX = "posenc t5 [flex]"
ALIBI_DENSE = "alibi dense mask"
XT_ALIBI = "x-transformers alibi"
XT_T5 = "x-transformers t5"
HF_T5 = "transformers t5"

#: Query rows compared with the reference at each end of the sequence (and as many spread between).
CHECK_ROWS = 32


# ---------------------------------------------------------------------------------------
# Paths: each builder takes the context and returns the per-call function


@dataclasses.dataclass
class Context:
    """The inputs and encodings shared by every path at one length."""

    q: Tensor
    k: Tensor
    v: Tensor
    alibi: Any  # posenc.ALiBi
    t5: Any  # posenc.RelativeBias

    @property
    def length(self) -> int:
        """The sequence length ``t``."""
        return self.q.shape[-2]

    @property
    def heads(self) -> int:
        """The number of heads ``h``."""
        return self.q.shape[1]


def make_context(length: int, heads: int, head_dim: int, seed: int = 0) -> Context:
    """Random ``q, k, v`` of shape ``(1, h, t, dh)`` and the posenc encodings (random T5 table)."""
    import posenc

    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, heads, length, head_dim, generator=generator) for _ in range(3))
    alibi = posenc.ALiBi(heads, causal=True)
    t5 = posenc.RelativeBias(heads, causal=True)
    with torch.no_grad():
        t5.relative_attention_bias.weight.copy_(torch.randn(t5.num_buckets, heads, generator=generator))
    return Context(q, k, v, alibi, t5)


def _causal_upper(length: int) -> Tensor:
    """``(t, t)`` bool, true above the diagonal (the positions a causal query must not see)."""
    return torch.ones(length, length, dtype=torch.bool).triu_(1)


def _sdpa_causal(ctx: Context) -> Callable[[], Tensor]:
    return lambda: F.scaled_dot_product_attention(ctx.q, ctx.k, ctx.v, is_causal=True)


def _posenc(encoding_attr: str, backend: str) -> Callable[[Context], Callable[[], Tensor]]:
    def build(ctx: Context) -> Callable[[], Tensor]:
        from posenc.attend import attention

        encoding = getattr(ctx, encoding_attr)
        return lambda: attention(ctx.q, ctx.k, ctx.v, encoding, causal=True, backend=backend)

    return build


def _alibi_dense_mask(ctx: Context) -> Tensor:
    """The materialised ``(1, h, t, t)`` float32 mask: ``-slope * (i - j)``, ``-inf`` above the diagonal."""
    t = ctx.length
    positions = torch.arange(t, dtype=torch.float32)
    distance = positions[None, :] - positions[:, None]  # (t, t): j - i
    mask = ctx.alibi.slopes.float().view(1, -1, 1, 1) * distance
    return mask.masked_fill_(_causal_upper(t), float("-inf"))


def _alibi_dense(ctx: Context, *, prebuilt: bool) -> Callable[[], Tensor]:
    if not prebuilt:
        return lambda: F.scaled_dot_product_attention(ctx.q, ctx.k, ctx.v, attn_mask=_alibi_dense_mask(ctx))
    mask = _alibi_dense_mask(ctx)
    return lambda: F.scaled_dot_product_attention(ctx.q, ctx.k, ctx.v, attn_mask=mask)


def _xt_attend_mask(ctx: Context, bias: Tensor, upper: Tensor) -> Tensor:
    """The mask x-transformers' ``Attend`` hands SDPA for a bias with ``causal=True``.

    As its flash path does: the bias expanded to ``(b, h, t, t)`` and the causal positions
    filled with ``-finfo.max // 2`` (a 4-d mask: SDPA reads a 3-d ``(h, t, t)`` one ~2.5x
    slower on the CPU, measured).
    """
    b, h = ctx.q.shape[:2]
    mask_value = -torch.finfo(ctx.q.dtype).max
    return bias.expand(b, h, -1, -1).masked_fill(upper, mask_value // 2)


def _xt_alibi(ctx: Context) -> Callable[[], Tensor]:
    from x_transformers.x_transformers import AlibiPositionalBias

    module = AlibiPositionalBias(heads=ctx.heads)
    upper = _causal_upper(ctx.length)
    t = ctx.length

    def run() -> Tensor:
        bias = module(t, t)  # (h, t, t), cached by the module after the first call
        return F.scaled_dot_product_attention(
            ctx.q, ctx.k, ctx.v, attn_mask=_xt_attend_mask(ctx, bias, upper)
        )

    return run


def _xt_t5(ctx: Context) -> Callable[[], Tensor]:
    from x_transformers.x_transformers import RelativePositionBias

    module = RelativePositionBias(
        scale=1.0,
        causal=True,
        num_buckets=ctx.t5.num_buckets,
        max_distance=ctx.t5.max_distance,
        heads=ctx.heads,
    )
    with torch.no_grad():
        module.relative_attention_bias.weight.copy_(ctx.t5.relative_attention_bias.weight)
    upper = _causal_upper(ctx.length)
    t = ctx.length

    def run() -> Tensor:
        bias = module(t, t)  # (h, t, t)
        return F.scaled_dot_product_attention(
            ctx.q, ctx.k, ctx.v, attn_mask=_xt_attend_mask(ctx, bias, upper)
        )

    return run


def _hf_t5_attention(ctx: Context):
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    config = T5Config(
        d_model=ctx.heads * ctx.q.shape[-1],
        d_kv=ctx.q.shape[-1],
        num_heads=ctx.heads,
        relative_attention_num_buckets=ctx.t5.num_buckets,
        relative_attention_max_distance=ctx.t5.max_distance,
        is_decoder=True,
    )
    module = T5Attention(config, has_relative_attention_bias=True, layer_idx=0, is_causal=True)
    with torch.no_grad():
        module.relative_attention_bias.weight.copy_(ctx.t5.relative_attention_bias.weight)
    return module


def _hf_t5(ctx: Context) -> Callable[[], Tensor]:
    module = _hf_t5_attention(ctx)
    upper = _causal_upper(ctx.length)
    t = ctx.length

    def run() -> Tensor:
        mask = module.compute_bias(t, t).masked_fill(upper, float("-inf"))  # (1, h, t, t)
        return F.scaled_dot_product_attention(ctx.q, ctx.k, ctx.v, attn_mask=mask)

    return run


@dataclasses.dataclass
class AttentionPath:
    """One attention path: how to build its per-call function and what its dense tensors cost."""

    name: str
    encoding: str | None  # "alibi", "t5" or None (which reference to check against)
    build: Callable[[Context], Callable[[], Tensor]]
    # bytes of the dense tensors one call holds at once, for the memory limit (0: none); the
    # formulas match the peaks measured at t=4096, h=8 (dense mask 592 MiB, x-transformers
    # ALiBi 1.01 GiB and T5 1.25 GiB, transformers T5 1.0 GiB)
    dense_bytes: Callable[[int, int], int] = lambda t, h: 0
    # the per-call function of the memory case, when it differs (e.g. includes a mask build)
    build_full: Callable[[Context], Callable[[], Tensor]] | None = None
    # the memory case's warm-up runs at the full length (compiled kernels: a recompile for a
    # new length would otherwise count as the case's memory; such paths hold no length cache)
    warmup_full_length: bool = False


PATHS: dict[str, AttentionPath] = {
    p.name: p
    for p in (
        AttentionPath(BASELINE, None, _sdpa_causal),
        AttentionPath(POSENC_ALIBI, "alibi", _posenc("alibi", "auto")),
        AttentionPath(POSENC_T5, "t5", _posenc("t5", "auto")),
        AttentionPath(POSENC_T5_FLEX, "t5", _posenc("t5", "flex"), warmup_full_length=True),
        AttentionPath(
            ALIBI_DENSE,
            "alibi",
            lambda ctx: _alibi_dense(ctx, prebuilt=True),
            dense_bytes=lambda t, h: 4 * h * t * t + 5 * t * t,
            build_full=lambda ctx: _alibi_dense(ctx, prebuilt=False),
        ),
        AttentionPath(XT_ALIBI, "alibi", _xt_alibi, dense_bytes=lambda t, h: 8 * h * t * t + 2 * t * t),
        AttentionPath(XT_T5, "t5", _xt_t5, dense_bytes=lambda t, h: 10 * h * t * t + 8 * t * t),
        AttentionPath(HF_T5, "t5", _hf_t5, dense_bytes=lambda t, h: 8 * h * t * t + 8 * t * t),
    )
}


# ---------------------------------------------------------------------------------------
# The float64 reference on a sample of query rows


def _paper_slopes(heads: int) -> Tensor:
    """ALiBi slopes from the paper's rule (Press et al.; non-powers of two as in its code)."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(heads).is_integer():
        return torch.tensor(power_of_two(heads), dtype=torch.float64)
    closest = 2 ** math.floor(math.log2(heads))
    extra = power_of_two(2 * closest)[0::2][: heads - closest]
    return torch.tensor(power_of_two(closest) + extra, dtype=torch.float64)


def check_rows(length: int) -> Tensor:
    """The query rows compared with the reference: the first and last ``CHECK_ROWS`` and some between."""
    rows = torch.cat(
        [
            torch.arange(min(CHECK_ROWS, length)),
            torch.linspace(0, length - 1, CHECK_ROWS).long(),
            torch.arange(max(length - CHECK_ROWS, 0), length),
        ]
    )
    return torch.unique(rows)


def reference_rows(ctx: Context, encoding: str | None, rows: Tensor) -> Tensor:
    """Causal attention for the given query rows in float64, bias from the formulas.

    Returns:
        ``(1, h, len(rows), dh)`` float64.
    """
    from transformers.models.t5.modeling_t5 import T5Attention

    q = ctx.q[:, :, rows].double()
    k, v = ctx.k.double(), ctx.v.double()
    t = ctx.length
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (1, h, r, t)
    relative = torch.arange(t)[None, :] - rows[:, None]  # (r, t): k_pos - q_pos
    if encoding == "alibi":
        scores = scores + _paper_slopes(ctx.heads).view(1, -1, 1, 1) * relative.double()
    elif encoding == "t5":
        buckets = T5Attention._relative_position_bucket(
            relative, bidirectional=False, num_buckets=ctx.t5.num_buckets, max_distance=ctx.t5.max_distance
        )
        table = ctx.t5.relative_attention_bias.weight.detach().double()  # (buckets, h)
        scores = scores + table[buckets].permute(2, 0, 1).unsqueeze(0)
    scores = scores.masked_fill(relative > 0, float("-inf"))
    return scores.softmax(-1) @ v
