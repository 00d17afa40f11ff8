"""Learned functions of distance as attention biases: KERPLE (Chi et al., 2022) and FIRE (Li et al., 2024)."""

from __future__ import annotations

from typing import Any, Literal, cast

import torch
from torch import Tensor, nn

from .._checks import check_bool, check_choice, check_positive_float, check_positive_int
from .._compat import outside_autocast
from ._bias import BiasFn, PositionBias

__all__ = ["FIRE", "KERPLE"]

#: KERPLE's parameters are clamped to at least this (the authors' code: 1e-2) so the kernels
#: stay conditionally positive definite; the power exponent also to at most 2.
KERPLE_EPS = 1e-2


class KERPLE(PositionBias):
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
        nn.init.uniform_(self.r1, 0.0, scale1)
        nn.init.uniform_(self.r2, 0.0, scale2)

    def bias_fn(self, dtype: torch.dtype, table: Tensor | None) -> BiasFn:
        log = self.kind_name == "log"
        r1 = self.r1.to(dtype).clamp(min=KERPLE_EPS)
        r2 = self.r2.to(dtype).clamp(KERPLE_EPS, None if log else 2.0)

        def kernel(q: Tensor, k: Tensor, h: Tensor) -> Tensor:
            d = (k - q).abs().to(dtype)
            return -r1[h] * (torch.log1p(r2[h] * d) if log else d.pow(r2[h]))

        return kernel

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, kind={self.kind_name!r}, causal={self.causal}"


class FIRE(PositionBias):
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

    by_distance = False  # the normaliser reads the query position
    repr_names = ("num_heads", "mlp_width", "init_threshold", "causal")

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
        self.bias_scratch = 1 + mlp_width  # the MLP's input and hidden layer, per (query, key) pair
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
            if isinstance(value := state_dict.get(prefix + name), Tensor) and value.dim() == 0:
                state_dict[prefix + name] = value.reshape(1)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def reset_parameters(self) -> None:
        """``c = init_c``, ``L_multiplier = 1``, the MLP as ``nn.Linear`` initialises it."""
        nn.init.constant_(self.c, self.init_c)
        nn.init.ones_(self.L_multiplier)
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

    def _weights(self, dtype: torch.dtype) -> list[Tensor]:
        """The MLP's ``w1 (w,)``, ``b1 (w,)``, ``w2 (h, w)`` and ``b2 (h,)``, in ``dtype``."""
        first, last = cast(nn.Linear, self.mlp[0]), cast(nn.Linear, self.mlp[2])
        return [t.to(dtype) for t in (first.weight.view(-1), first.bias, last.weight, last.bias)]

    def dense_bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, table: Tensor | None) -> Tensor:
        x = self.normalized_distance(q_pos, k_pos, dtype)  # (1|b, tq, tk)
        w1, b1, w2, b2 = self._weights(dtype)
        hidden = torch.relu(x.unsqueeze(-1) * w1 + b1)  # (1|b, tq, tk, w)
        # outside autocast: the bias is float32 or better whatever the inputs (as every bias here)
        out = outside_autocast(torch.matmul, hidden, w2.t()) + b2
        return out.movedim(-1, 1).contiguous()  # (1|b, tq, tk, h) -> heads outermost

    def bias_fn(self, dtype: torch.dtype, table: Tensor | None) -> BiasFn:
        # The score_mod's form: scalar ops only (FlexAttention calls it per score).
        w1, b1, w2, b2 = self._weights(dtype)

        def mlp(q: Tensor, k: Tensor, h: Tensor) -> Tensor:
            x = self.normalized_distance(q, k, dtype)
            total = b2[h]
            for m in range(self.mlp_width):
                total = total + w2[h, m] * torch.relu(x * w1[m] + b1[m])
            return total

        return mlp
