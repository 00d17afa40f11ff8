"""Converting q/k projection weights between the two RoPE channel layouts.

In the interleaved layout (GPT-J, Meta's Llama, RoFormer) channels ``2i`` and ``2i+1`` of a
head rotate together at frequency ``i``; in the half-split layout (GPT-NeoX, Hugging Face
Llama) channels ``i`` and ``i + r/2`` do. Permuting the rows of the query and key projections
per head, within the rotated channels only, moves a checkpoint from one layout to the other
with identical attention scores (the permutation Llama conversion scripts apply to Meta's
weights). Nothing here depends on where the checkpoint came from.

Shape key: ``h`` heads, ``dh`` head width, ``r`` rotated channels per head, ``i`` input features.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from .._checks import check_choice, check_positive_int, check_rotary_channels

__all__ = ["half_to_interleaved", "interleaved_to_half", "rope_layout_permutation"]


def rope_layout_permutation(
    head_dim: int,
    rotary_dim: int | None = None,
    *,
    to: Literal["half", "interleaved"] = "half",
    rotary_offset: int = 0,
    device: torch.device | str | None = None,
) -> Tensor:
    """Channel order within one head that converts between the two RoPE layouts.

    ``new = old[..., perm]`` re-orders a head's channels from one layout to the other;
    channels outside the rotated ones stay in place.

    Args:
        head_dim: channels per head ``dh``, a positive int.
        rotary_dim: rotated channels ``r`` (the first ``r`` of each head, or those from
            ``rotary_offset`` on), a positive even int ``<= head_dim``; ``None`` means all.
        to: ``"half"`` (interleaved -> half) or ``"interleaved"`` (half -> interleaved).
        rotary_offset: the first rotated channel, as :class:`~posenc.RoPE`'s (``dh - r``: the
            last ``r``, DeepSeek V4's and Mistral 4's ``[nope | rope]`` heads).
        device: where the index tensor is made.

    Returns:
        A ``(dh,)`` long tensor, a permutation of ``0 .. dh-1``.

    Raises:
        TypeError: ``head_dim`` or ``rotary_dim`` is not an int.
        ValueError: a size out of range, or ``to`` not one of the two layouts.
    """
    rotary_dim = check_rotary_channels(check_positive_int("head_dim", head_dim), rotary_dim, rotary_offset)
    check_choice("to", to, ("half", "interleaved"))
    # to "half": half channel j takes interleaved channel 2j, half + j takes 2j + 1 (0, 2, 4, .., 1, 3, ..);
    # to "interleaved": channel 2j takes half channel j, 2j + 1 takes half + j (0, r/2, 1, r/2 + 1, ..)
    pairs = (rotary_dim // 2, 2) if to == "half" else (2, rotary_dim // 2)
    rotated = torch.arange(rotary_dim).view(pairs).T.flatten()
    perm = torch.arange(head_dim)
    perm[rotary_offset : rotary_offset + rotary_dim] = rotated + rotary_offset
    return perm.to(device)


def _permute_heads(
    weight: Tensor,
    num_heads: int,
    head_dim: int | None,
    rotary_dim: int | None,
    to: Literal["half", "interleaved"],
    rotary_offset: int,
) -> Tensor:
    if not isinstance(weight, Tensor):
        raise TypeError(
            f"weight must be a torch.Tensor of shape (num_heads*head_dim, ...), got {type(weight).__name__}"
        )
    if weight.dim() not in (1, 2):
        raise ValueError(
            "weight must be a projection weight (num_heads*head_dim, in_features) or bias (num_heads*head_dim,), "
            f"got shape {tuple(weight.shape)}"
        )
    check_positive_int("num_heads", num_heads)
    rows = weight.shape[0]
    if head_dim is None:
        if rows % num_heads:
            raise ValueError(f"weight has {rows} rows, not a multiple of num_heads={num_heads}")
        head_dim = rows // num_heads
    if rows != num_heads * head_dim:
        raise ValueError(
            f"weight has {rows} rows, expected num_heads*head_dim = {num_heads}*{head_dim} = {num_heads * head_dim}"
        )
    perm = rope_layout_permutation(
        head_dim, rotary_dim, to=to, rotary_offset=rotary_offset, device=weight.device
    )
    # (h*dh, ...) -> (h, dh, ...): re-order channels within each head, then flatten back.
    return weight.reshape(num_heads, head_dim, *weight.shape[1:]).index_select(1, perm).reshape(weight.shape)


def interleaved_to_half(
    weight: Tensor,
    num_heads: int,
    head_dim: int | None = None,
    rotary_dim: int | None = None,
    *,
    rotary_offset: int = 0,
) -> Tensor:
    """Permute q/k projection rows from the interleaved RoPE layout to the half-split one.

    A model whose RoPE rotates channel pairs ``(2i, 2i+1)`` (Meta's Llama checkpoints, GPT-J)
    computes the same attention scores as the half-split model (``rotate_half``: pairs
    ``(i, i + r/2)``) once its query and key projections are permuted with this function:
    within each head, rotated channel ``2i`` moves to ``i`` and ``2i+1`` to ``i + r/2``. This is
    the permutation Hugging Face's Llama conversion script applies. Apply it to ``q_proj`` and
    ``k_proj`` weights and biases (for grouped-query attention, with ``num_heads`` = the
    key/value heads for ``k_proj``); values and the output projection are unchanged.

    Args:
        weight: ``(h*dh, i)`` projection weight (``nn.Linear.weight``) or ``(h*dh,)`` bias.
        num_heads: heads ``h`` in this projection.
        head_dim: ``dh``; ``None`` means ``rows // num_heads``.
        rotary_dim: rotated channels ``r`` per head (partial rotary: the first ``r``);
            ``None`` means all ``dh``.
        rotary_offset: the first rotated channel (``dh - r``: the last ``r``), as
            :class:`~posenc.RoPE`'s.

    Returns:
        A new tensor of the same shape, dtype and device.

    Raises:
        TypeError: ``weight`` is not a tensor, or a size is not an int.
        ValueError: ``weight`` is not 1-D or 2-D, or its rows do not split into heads.
    """
    return _permute_heads(weight, num_heads, head_dim, rotary_dim, "half", rotary_offset)


def half_to_interleaved(
    weight: Tensor,
    num_heads: int,
    head_dim: int | None = None,
    rotary_dim: int | None = None,
    *,
    rotary_offset: int = 0,
) -> Tensor:
    """Permute q/k projection rows from the half-split RoPE layout to the interleaved one.

    The inverse of :func:`interleaved_to_half` (same arguments): within each head, rotated
    channel ``i`` moves to ``2i`` and ``i + r/2`` to ``2i+1``.

    Args:
        weight: ``(h*dh, i)`` projection weight or ``(h*dh,)`` bias.
        num_heads: heads ``h`` in this projection.
        head_dim: ``dh``; ``None`` means ``rows // num_heads``.
        rotary_dim: rotated channels ``r`` per head; ``None`` means all ``dh``.
        rotary_offset: the first rotated channel, as :class:`~posenc.RoPE`'s.

    Returns:
        A new tensor of the same shape, dtype and device.

    Raises:
        TypeError: ``weight`` is not a tensor, or a size is not an int.
        ValueError: ``weight`` is not 1-D or 2-D, or its rows do not split into heads.
    """
    return _permute_heads(weight, num_heads, head_dim, rotary_dim, "interleaved", rotary_offset)
