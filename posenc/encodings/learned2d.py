"""A learned 2D table of patch positions (ViT, DINOv2, SigLIP), resampled for other grids."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
from torch import Tensor, nn

from .._checks import check_bool, check_choice, check_int, check_positive_float, is_real, short
from ..base import PositionalEncoding
from ..functional.axial import resample_grid_table
from ._patches import add_patch_table, input_grid, patch_grid

__all__ = ["Learned2D"]


class Learned2D(PositionalEncoding):
    """A trained embedding per patch of an ``h × w`` grid, plus one per prefix token.

    The position embeddings of ViT (Dosovitskiy et al., 2021), DeiT, DINOv2 and SigLIP: row
    ``p + i*w + j`` of ``weight`` is added to patch ``(i, j)``, rows ``0 .. p-1`` to the
    ``p = num_prefix_tokens`` class/register tokens (ViT's ``position_embeddings[0, 1:]`` is the
    grid, ``[0, :1]`` the class token: ``weight`` is that tensor without its batch dimension).

    At another grid size the grid part is resampled as an image with ``d`` channels
    (:func:`posenc.functional.resample_grid_table`: bicubic, ``align_corners=False``, as ViT's and
    DINOv2's ``interpolate_pos_encoding``; ``antialias=True`` as timm's ``resample_abs_pos_embed``),
    the prefix rows unchanged. ``interpolate_offset`` reproduces the DINOv2 authors' code
    (``interpolate_pos_encoding`` in facebookresearch/dinov2, default 0.1 there): the grid is resized
    by the scale factors ``(H + offset) / h``, ``(W + offset) / w`` instead of to the size ``(H, W)``,
    which moves the sample points slightly (transformers' and timm's DINOv2 use 0). With
    ``interpolate=False`` a smaller grid takes the table's top-left cells and a larger one is an
    error naming both sizes. :meth:`resize` makes a new
    grid permanent (fine-tuning at a higher resolution).

    Args:
        d_model: the embedding width.
        grid_size: the table's grid ``(h, w)``, or ``s`` for ``s × s``.
        num_prefix_tokens: rows for tokens before the patches (1 for ViT's class token).
        interpolate: resample for other grids (else crop, or refuse larger grids).
        mode: the resampling mode (``"bicubic"``, ``"bilinear"``, ``"nearest"``, ``"area"``), or NaViT's
            ``"bucketize"`` look-up (Idefics 2/3, SmolVLM; ``"bucketize_divide"``: MiniCPM-V's;
            :func:`~posenc.functional.resample_grid_table`).
        antialias: low-pass filter when shrinking (bicubic/bilinear only).
        interpolate_offset: DINOv2's offset added to the new grid size in the scale factors,
            in ``[0, 1)`` (0: resize to the size, as transformers and timm).
        init_std: standard deviation of the normal initialisation (0.02 as ViT).
        device, dtype: of the parameter.

    Shape:
        ``forward(x, positions=None, grid=None)``: ``x`` ``(b, h, w, d)`` patches, or flat
        ``(b, p + n, d)`` tokens whose ``n`` patches form ``grid`` (default: the table's grid
        when ``n == h*w``, else a square grid). ``positions`` (flat only): ``(n,)`` or ``(b, n)``
        row-major patch indices into ``grid`` (MAE's visible patches). Returns ``x``'s shape and dtype.
    """

    kind = "additive"
    repr_names: ClassVar[tuple[str, ...]] = ("d_model", "/", "grid_size", "num_prefix_tokens", "interpolate")
    repr_names += ("mode", "antialias", "interpolate_offset")
    repr_optional = ("interpolate", "interpolate_offset")

    def __init__(
        self,
        d_model: int,
        grid_size: int | tuple[int, int] | list[int],
        *,
        num_prefix_tokens: int = 0,
        interpolate: bool = True,
        mode: Literal["bicubic", "bilinear", "nearest", "area", "bucketize", "bucketize_divide"] = "bicubic",
        antialias: bool = False,
        interpolate_offset: float = 0.0,
        init_std: float = 0.02,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.grid_size = patch_grid("grid_size", grid_size)
        self.num_prefix_tokens = check_int("num_prefix_tokens", num_prefix_tokens, minimum=0)
        self.interpolate = check_bool("interpolate", interpolate)
        check_choice(
            "mode", mode, ("bicubic", "bilinear", "nearest", "area", "bucketize", "bucketize_divide")
        )
        self.mode = mode
        self.antialias = check_bool("antialias", antialias)
        if antialias and mode not in ("bicubic", "bilinear"):
            raise ValueError(f"antialias=True needs mode 'bicubic' or 'bilinear', got mode={mode!r}")
        if not is_real(interpolate_offset):
            kind = type(interpolate_offset).__name__
            raise TypeError(f"interpolate_offset must be a float, got {short(interpolate_offset)} ({kind})")
        if not 0 <= interpolate_offset < 1:  # also refuses NaN and inf; 1 or more would add a row or column
            raise ValueError(
                f"interpolate_offset must be a finite number in [0, 1), got {short(interpolate_offset)}"
            )
        self.interpolate_offset = float(interpolate_offset)
        self.init_std = check_positive_float("init_std", init_std)
        rows = self.num_prefix_tokens + math.prod(self.grid_size)
        self.weight = nn.Parameter(torch.empty(rows, d_model, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal initialisation with ``init_std`` (ViT uses a truncated normal of 0.02)."""
        nn.init.normal_(self.weight, std=self.init_std)

    def table(self, grid: int | tuple[int, int] | list[int] | None = None) -> Tensor:
        """The ``(p + H*W, d)`` rows added to a flat input on ``grid`` (default: the table's grid)."""
        return self._resampled(self.grid_size if grid is None else patch_grid("grid", grid), self.interpolate)

    def _resampled(self, new: tuple[int, ...], interpolate: bool) -> Tensor:
        (h, w), (nh, nw), p = self.grid_size, new, self.num_prefix_tokens
        if new == self.grid_size or interpolate:
            off = self.interpolate_offset
            # F.interpolate's output size is floor(old * scale): a tiny offset can round below the new size
            if off and (int(h * ((nh + off) / h)), int(w * ((nw + off) / w))) != new:
                raise ValueError(
                    f"interpolate_offset={off} resizes grid_size {self.grid_size} to fewer cells than grid {new} "
                    "(floating-point rounding); use a larger offset such as DINOv2's 0.1"
                )
            return resample_grid_table(
                self.weight,
                (h, w),
                new,
                num_prefix_tokens=p,
                mode=self.mode,
                antialias=self.antialias,
                interpolate_offset=off,
            )
        if nh > h or nw > w:
            raise ValueError(
                f"grid {new} is larger than the table's grid_size {self.grid_size} and interpolate=False; "
                "build with interpolate=True or call resize()"
            )
        body = self.weight[p:].view(h, w, -1)[:nh, :nw].reshape(nh * nw, -1)
        return torch.cat((self.weight[:p], body))

    @torch.no_grad()
    def resize(self, new_grid: int | tuple[int, int] | list[int]) -> None:
        """Resample the table to ``new_grid`` for good (a new parameter: rebuild optimizers)."""
        new = patch_grid("new_grid", new_grid)
        table = self._resampled(new, interpolate=True).detach().clone()
        self.weight = nn.Parameter(table, requires_grad=self.weight.requires_grad)
        self.grid_size = new

    def _flat_grid(self, n: int, grid: object, positions: Tensor | None) -> tuple[int, ...]:
        """The grid of ``n`` flat patches: ``grid`` if given, else the table's (always when ``positions``
        select among its patches), else a square one."""
        if grid is not None:
            return patch_grid("grid", grid)
        if positions is not None or n == math.prod(self.grid_size):
            return self.grid_size
        side = math.isqrt(n)
        if side * side != n:
            raise ValueError(
                f"x has {n} patch tokens (after num_prefix_tokens={self.num_prefix_tokens}), not the table's "
                f"grid_size {self.grid_size} nor a square grid; pass grid=(h, w)"
            )
        return side, side

    def encode_input(self, x: Tensor, positions: Tensor | None = None, grid: object = None) -> Tensor:
        """Add the (resampled) table to patch tokens.

        Args:
            x: ``(b, h, w, d)`` patches or ``(b, p + n, d)`` tokens.
            positions: flat input only: ``(n,)``/``(b, n)`` row-major indices into ``grid``.
            grid: flat input only: the patches' ``(h, w)`` (see the class).

        Returns:
            ``x`` plus the encodings, same shape, in ``x.dtype``.
        """
        p = self.num_prefix_tokens
        hw = input_grid(x, self.d_model, p, positions=positions, grid=grid)
        hw = hw or self._flat_grid(x.shape[1] - p, grid, positions)
        return add_patch_table(x, self._resampled(hw, self.interpolate), hw, p, positions, "grid")
