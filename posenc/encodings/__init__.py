"""One module per family of encodings; importing this package registers them all."""

from .alibi import ALiBi
from .axial import AxialRoPE
from .learned import Learned
from .learned2d import Learned2D
from .learned_bias import FIRE, KERPLE
from .mrope import MRoPE
from .none import NoPE
from .relative import RelativeBias
from .rotary import RoPE
from .shaw import ShawRelative
from .sinusoidal import Sinusoidal, Sinusoidal2D
from .temperature import QueryTemperature
from .transformer_xl import RelPosXL
from .xpos import XPos

__all__ = [
    "FIRE",
    "KERPLE",
    "ALiBi",
    "AxialRoPE",
    "Learned",
    "Learned2D",
    "MRoPE",
    "NoPE",
    "QueryTemperature",
    "RelPosXL",
    "RelativeBias",
    "RoPE",
    "ShawRelative",
    "Sinusoidal",
    "Sinusoidal2D",
    "XPos",
]
