"""Pure tensor functions for the rotary encodings (no state)."""

from __future__ import annotations

__all__: list[str] = []
