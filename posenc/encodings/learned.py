"""A learned table of absolute positions (BERT, GPT-2), looked up by position ids."""

from __future__ import annotations

from ..base import PositionalEncoding
from ..registry import register

__all__ = ["Learned"]


@register("learned")
class Learned(PositionalEncoding):
    """SKELETON: to be implemented."""

    kind = "additive"

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
