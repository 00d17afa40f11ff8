"""posenc: position encodings for attention models behind one interface and a registry.

>>> import posenc
>>> rope = posenc.build("rope(base=500000.0)", head_dim=64)
>>> q, k = rope.encode_qk(q, k)          # doctest: +SKIP
"""

from . import functional, nn
from .attention import attention
from .base import PositionalEncoding, mask_to_positions
from .encodings import ALiBi, Learned, NoPE, RelativeBias, RoPE, Sinusoidal, Sinusoidal2D
from .hf import from_hf_config, from_hf_model
from .registry import Spec, available, build, describe, register

__version__ = "0.1.0"

__all__ = [
    "ALiBi",
    "Learned",
    "NoPE",
    "PositionalEncoding",
    "RelativeBias",
    "RoPE",
    "Sinusoidal",
    "Sinusoidal2D",
    "Spec",
    "__version__",
    "attention",
    "available",
    "build",
    "describe",
    "from_hf_config",
    "from_hf_model",
    "functional",
    "mask_to_positions",
    "nn",
    "register",
]
