"""posenc: position encodings for attention models behind one interface and a registry.

>>> import posenc
>>> rope = posenc.build("rope(base=500000.0)", head_dim=64)
>>> q, k = rope.encode_qk(q, k)          # doctest: +SKIP
"""

from . import distributed, functional, nn
from .attention import attention
from .base import PositionalEncoding, mask_to_positions
from .encodings import (
    FIRE,
    KERPLE,
    ALiBi,
    AxialRoPE,
    Learned,
    Learned2D,
    MRoPE,
    NoPE,
    RelativeBias,
    RelPosXL,
    RoPE,
    ShawRelative,
    Sinusoidal,
    Sinusoidal2D,
    XPos,
)
from .encodings.temperature import QueryTemperature
from .hf import from_hf_config, from_hf_model
from .masking import document_positions
from .registry import Spec, available, build, describe, register

__version__ = "0.1.0"

__all__ = [
    "FIRE",
    "KERPLE",
    "ALiBi",
    "AxialRoPE",
    "Learned",
    "Learned2D",
    "MRoPE",
    "NoPE",
    "PositionalEncoding",
    "QueryTemperature",
    "RelPosXL",
    "RelativeBias",
    "RoPE",
    "ShawRelative",
    "Sinusoidal",
    "Sinusoidal2D",
    "Spec",
    "XPos",
    "__version__",
    "attention",
    "available",
    "build",
    "describe",
    "distributed",
    "document_positions",
    "from_hf_config",
    "from_hf_model",
    "functional",
    "mask_to_positions",
    "nn",
    "register",
]
