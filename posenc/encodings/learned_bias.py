"""Learned functions of distance as attention biases: KERPLE (Chi et al., 2022) and FIRE (Li et al., 2024)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, cast

import torch
from torch import Tensor, nn

from .._checks import check_bool, check_choice, check_positive_float, check_positive_int
from .._compat import precise_dtype
from .._positions import check_bias_qk, check_scores
from ..base import PositionalEncoding, PositionState, ScoreMod
from ..functional.relative import position_indexer, toeplitz_by_distance
from ..functional.shaw import matmul_outside_autocast

__all__ = ["FIRE", "KERPLE", "LearnedBiasState"]

#: ``(q_position, k_position, head) -> bias`` on 0-d tensors, for a FlexAttention score_mod.
ScalarBias = Callable[[Tensor, Tensor, Tensor], Tensor]

#: KERPLE's parameters are clamped to at least this (the authors' code: 1e-2) so the kernels
#: stay conditionally positive definite; the power exponent also to at most 2.
KERPLE_EPS = 1e-2


class LearnedBiasState(PositionState):
    """The position state of a learned bias: positions, and the bias computed from them per call.

    Every method reads the encoding's parameters at call time (so gradients reach them) and
    works on any block of positions, so :meth:`narrow` (the base class's) serves the chunked path.
    """

    encoding: _LearnedBias

    @property
    def bias_heads(self) -> int | None:
        return self.encoding.num_heads

    @property
    def bias_scratch(self) -> int:  # type: ignore[override]
        # FIRE's MLP runs on every (query, key) pair: its input and hidden layer.
        encoding = self.encoding
        return 1 + encoding.mlp_width if isinstance(encoding, FIRE) else 0

    def bias_by_distance(self, dtype: torch.dtype) -> Tensor | None:
        if not isinstance(self.encoding, KERPLE):
            return None  # FIRE also depends on the query position (its normaliser)
        distances = self.distances()
        if distances is None:
            return None
        return self.encoding.kernel(distances.abs(), dtype)  # (h, tq + tk - 1)

    def bias(self, dtype: torch.dtype) -> Tensor:
        """The ``(1|b, h, tq, tk)`` bias in ``dtype``."""
        values = self.bias_by_distance(dtype)
        if values is not None:
            return toeplitz_by_distance(values, self.q_len, self.k_len).unsqueeze(0)
        qp, kp = self.q_positions, self.k_positions
        bias = self.encoding._bias(qp.unsqueeze(-1), kp.unsqueeze(-2), dtype)  # (h, tq, tk) or (b, h, ..)
        return bias.unsqueeze(0) if bias.dim() == 3 else bias

    def attention_bias(self, q: Tensor, k: Tensor) -> Tensor:
        """The bias of every (query, key) pair: ``(1, h, tq, tk)`` (``(b, h, tq, tk)`` for ``(b, t)`` positions).

        Args:
            q: ``(b, h, tq, dh)`` queries (shape, device and dtype only); ``h == num_heads``.
            k: ``(b, h_kv, tk, dh)`` keys (likewise).

        Returns:
            float32 (float64 for float64 ``q``), differentiable in the parameters.
        """
        check_bias_qk(q, k, self.encoding.num_heads)
        return self.bias(precise_dtype(q))

    def score_mod(self, q: Tensor, k: Tensor) -> ScoreMod:
        """A FlexAttention ``score_mod`` computing the same bias per score inside the kernel."""
        check_bias_qk(q, k, self.encoding.num_heads)
        q_pos, k_pos = position_indexer(self.q_positions), position_indexer(self.k_positions)
        scalar = self.encoding._scalar_bias(precise_dtype(q))

        def learned_bias_score_mod(
            score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor
        ) -> Tensor:
            return score + scalar(q_pos(b, q_idx), k_pos(b, kv_idx), h).to(score.dtype)

        return learned_bias_score_mod


class _LearnedBias(PositionalEncoding):
    """Shared base of :class:`KERPLE` and :class:`FIRE`: each defines ``_bias`` and ``_scalar_bias``,
    and :class:`LearnedBiasState` (its :attr:`state_class`) writes the hooks with them."""

    kind = "bias"
    state_class = LearnedBiasState
    num_heads: int
    causal: bool

    def _bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """``(h, ...)`` bias for broadcastable integer positions ``q_pos`` ``(.., tq, 1)``, ``k_pos`` ``(.., 1, tk)``."""
        raise NotImplementedError

    def _scalar_bias(self, dtype: torch.dtype) -> ScalarBias:
        raise NotImplementedError

    def forward(
        self, scores: Tensor, q_positions: Tensor | None = None, k_positions: Tensor | None = None
    ) -> Tensor:
        """Add the bias to attention scores ``(b, h, tq, tk)`` (the drop-in call); the scores' dtype."""
        check_scores(scores, self.num_heads)
        b, _, tq, tk = scores.shape
        state = cast(
            LearnedBiasState,
            self._own_state(
                tq, tk, q_positions=q_positions, k_positions=k_positions, batch=b, device=scores.device
            ),
        )
        compute = precise_dtype(scores)
        return (scores.to(compute) + state.bias(compute)).to(scores.dtype)


class KERPLE(_LearnedBias):
    """KERPLE: a kernelised relative bias with two learned parameters per head.

    Chi, Fan, Ramadge & Rudnicky (2022), "KERPLE: Kernelized Relative Positional Embedding for
    Length Extrapolation". The bias of head ``h`` at distance ``|i - j|`` is

    * ``kind="log"``:   ``-r1 * log(1 + r2 * |i - j|)`` (the paper's best), or
    * ``kind="power"``: ``-r1 * |i - j| ** r2``,

    with ``r1, r2 >= 1e-2`` and, for the power kernel, ``r2 <= 2`` (clamped at every call, as the
    authors' code does, so the kernels stay conditionally positive definite). Initialised as
    there: log ``r1 ~ U(0, 2)``, ``r2 ~ U(0, 1)``; power ``r1 ~ U(0, 1)``, ``r2 ~ U(0, 2)``. The bias
    depends on the distance alone: with default positions :func:`posenc.attention` reads it from
    a ``(h, tq + tk - 1)`` vector (no ``(h, tq, tk)`` tensor).

    Args:
        num_heads: attention heads.
        kind: ``"log"`` or ``"power"``.
        causal: recorded only (the bias is symmetric; the attention masks).
        device, dtype: of the parameters.

    Attributes:
        r1, r2: ``(h,)`` learned parameters (before clamping).

    Shape:
        ``forward(scores)``: ``(b, h, tq, tk) -> (b, h, tq, tk)``.
    """

    def __init__(
        self,
        num_heads: int,
        kind: Literal["log", "power"] = "log",
        causal: bool = True,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        check_choice("kind", kind, ("log", "power"))
        self.kind_name = kind
        self.causal = check_bool("causal", causal)
        self.r1 = nn.Parameter(torch.empty(num_heads, device=device, dtype=dtype))
        self.r2 = nn.Parameter(torch.empty(num_heads, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The authors' initialisation (see the class docstring)."""
        scale1, scale2 = (2.0, 1.0) if self.kind_name == "log" else (1.0, 2.0)
        with torch.no_grad():
            self.r1.uniform_(0.0, scale1)
            self.r2.uniform_(0.0, scale2)

    def kernel(self, distance: Tensor, dtype: torch.dtype) -> Tensor:
        """The bias at non-negative distances ``(...)``: ``(h, ...)`` in ``dtype``, differentiable."""
        shape = (-1,) + (1,) * distance.dim()
        r1 = self.r1.to(dtype).clamp(min=KERPLE_EPS).view(shape)
        d = distance.to(dtype)
        if self.kind_name == "log":
            r2 = self.r2.to(dtype).clamp(min=KERPLE_EPS).view(shape)
            return -r1 * torch.log1p(r2 * d)
        r2 = self.r2.to(dtype).clamp(KERPLE_EPS, 2.0).view(shape)
        return -r1 * d.pow(r2)

    def _bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        bias = self.kernel((k_pos - q_pos).abs(), dtype)  # (h, tq, tk) or (h, b, tq, tk)
        return bias.transpose(0, 1) if bias.dim() == 4 else bias

    def _scalar_bias(self, dtype: torch.dtype) -> ScalarBias:
        r1 = self.r1.to(dtype).clamp(min=KERPLE_EPS)
        log = self.kind_name == "log"
        r2 = self.r2.to(dtype).clamp(min=KERPLE_EPS) if log else self.r2.to(dtype).clamp(KERPLE_EPS, 2.0)

        def scalar(q: Tensor, k: Tensor, h: Tensor) -> Tensor:
            d = (k - q).abs().to(dtype)
            return -r1[h] * (torch.log1p(r2[h] * d) if log else d.pow(r2[h]))

        return scalar

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, kind={self.kind_name!r}, causal={self.causal}"


class FIRE(_LearnedBias):
    """FIRE: functional interpolation for relative positions, a learned function of normalised distance.

    Li et al. (2024), "Functional Interpolation for Relative Positions Improves Long Context
    Transformers" (ICLR). The bias of head ``h`` for query ``i`` and key ``j`` is
    ``f(psi(|i - j|) / psi(max(i, L)))`` with ``psi(x) = log(c * x + 1)``, ``f`` an MLP
    ``1 -> mlp_width -> h`` (ReLU), ``c`` learned (init 0.1) and the threshold
    ``L = |L_multiplier| * init_threshold`` learned through ``L_multiplier`` (init 1). The
    normaliser makes the input lie in ``[0, 1]`` for causal attention at any length (the paper's
    interpolation). Bidirectional attention uses ``|i - j|`` as the authors' code does (``f``
    cannot tell keys after the query from keys before).

    Memory: the MLP's hidden layer is ``(.., tq, tk, mlp_width)`` for a block of queries; the
    chunked path of :func:`posenc.attention` bounds it by the chunk.

    Args:
        num_heads: attention heads.
        mlp_width: hidden width of ``f`` (32).
        init_threshold: ``L`` at initialisation (512), a positive float.
        init_c: ``c`` at initialisation (0.1).
        causal: recorded only (the attention masks).
        eps: added to the normaliser (1e-6).
        device, dtype: of the parameters.

    Shape:
        ``forward(scores)``: ``(b, h, tq, tk) -> (b, h, tq, tk)``.
    """

    def __init__(
        self,
        num_heads: int,
        mlp_width: int = 32,
        init_threshold: float = 512.0,
        init_c: float = 0.1,
        causal: bool = True,
        eps: float = 1e-6,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.mlp_width = check_positive_int("mlp_width", mlp_width)
        self.init_threshold = check_positive_float("init_threshold", init_threshold)
        self.init_c = check_positive_float("init_c", init_c)
        self.eps = check_positive_float("eps", eps)
        self.causal = check_bool("causal", causal)
        self.mlp = nn.Sequential(
            nn.Linear(1, mlp_width, device=device, dtype=dtype),
            nn.ReLU(),
            nn.Linear(mlp_width, num_heads, device=device, dtype=dtype),
        )
        # Shape (1,), not 0-d as in the authors' code: FSDP2's fully_shard refuses 0-d parameters.
        # Their 0-d checkpoints still load (_load_from_state_dict).
        self.c = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        self.L_multiplier = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        self.reset_parameters()

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        for name in ("c", "L_multiplier"):  # a 0-d value (the authors' layout, older posenc) -> (1,)
            value = state_dict.get(prefix + name)
            if isinstance(value, Tensor) and value.dim() == 0:
                state_dict[prefix + name] = value.reshape(1)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def reset_parameters(self) -> None:
        """``c = init_c``, ``L_multiplier = 1``, the MLP as ``nn.Linear`` initialises it."""
        with torch.no_grad():
            self.c.fill_(self.init_c)
            self.L_multiplier.fill_(1.0)
        for layer in (self.mlp[0], self.mlp[2]):
            cast(nn.Linear, layer).reset_parameters()

    @property
    def threshold(self) -> Tensor:
        """The learned threshold ``L = |L_multiplier| * init_threshold`` (0-d)."""
        return (self.L_multiplier.reshape(()) * self.init_threshold).abs()

    def normalized_distance(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """``psi(|i - j|) / (psi(max(i, L)) + eps)`` for broadcastable integer positions."""
        c = self.c.to(dtype).reshape(())
        distance = (q_pos - k_pos).abs().to(dtype)
        normaliser = torch.maximum(q_pos.to(dtype), self.threshold.to(dtype))
        return torch.log1p((c * distance).abs()) / (torch.log1p((c * normaliser).abs()) + self.eps)

    def _bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        x = self.normalized_distance(q_pos, k_pos, dtype)  # (tq, tk) or (b, tq, tk)
        first, last = cast(nn.Linear, self.mlp[0]), cast(nn.Linear, self.mlp[2])
        hidden = torch.relu(x.unsqueeze(-1) * first.weight.to(dtype).view(-1) + first.bias.to(dtype))
        # outside autocast: the bias is float32 or better whatever the inputs (as every bias here)
        out = matmul_outside_autocast(hidden, last.weight.to(dtype).t()) + last.bias.to(
            dtype
        )  # (.., tq, tk, h)
        return out.movedim(-1, -3).contiguous()  # heads outermost: (h, tq, tk) or (b, h, tq, tk)

    def _scalar_bias(self, dtype: torch.dtype) -> ScalarBias:
        first, last = cast(nn.Linear, self.mlp[0]), cast(nn.Linear, self.mlp[2])
        w1, b1 = first.weight.to(dtype).view(-1), first.bias.to(dtype)
        w2, b2 = last.weight.to(dtype), last.bias.to(dtype)

        def scalar(q: Tensor, k: Tensor, h: Tensor) -> Tensor:
            x = self.normalized_distance(q, k, dtype)
            total = b2[h]
            for m in range(self.mlp_width):  # scalar ops only: FlexAttention's score_mod is per score
                total = total + w2[h, m] * torch.relu(x * w1[m] + b1[m])
            return total

        return scalar

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, mlp_width={self.mlp_width}, init_threshold={self.init_threshold}, "
            f"causal={self.causal}"
        )
