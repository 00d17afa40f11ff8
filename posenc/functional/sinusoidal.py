"""Pure tensor functions for the sinusoidal encodings (no state)."""

from __future__ import annotations

__all__: list[str] = []
