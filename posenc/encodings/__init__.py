"""The built-in encodings, one module per family, and the one place that names them.

:data:`BUILTIN` gives each built-in class its registry names (the first is the canonical name, the
rest aliases); :mod:`posenc.registry` registers them when it is imported. The encodings themselves
import nothing of the registry.
"""

from .alibi import ALiBi
from .axial import AxialRoPE
from .learned import Learned
from .learned2d import Learned2D
from .learned_bias import FIRE, KERPLE
from .mrope import MRoPE
from .none import NoPE
from .relative import RelativeBias
from .rope import RoPE
from .shaw import ShawRelative
from .sinusoidal import Sinusoidal
from .sinusoidal2d import Sinusoidal2D
from .temperature import QueryTemperature
from .transformer_xl import RelPosXL
from .xpos import XPos

#: Each built-in encoding and its registry names: ``build("t5")`` is ``RelativeBias``.
BUILTIN = (
    (Sinusoidal, ("sinusoidal", "sincos")),
    (Sinusoidal2D, ("sinusoidal2d",)),
    (Learned, ("learned",)),
    (Learned2D, ("learned2d",)),
    (RoPE, ("rope", "rotary")),
    (AxialRoPE, ("rope_axial", "rope2d")),
    (MRoPE, ("mrope",)),
    (XPos, ("xpos",)),
    (QueryTemperature, ("query_temperature", "llama4_nope")),
    (RelativeBias, ("relative_bias", "t5")),
    (ALiBi, ("alibi",)),
    (KERPLE, ("kerple",)),
    (FIRE, ("fire",)),
    (ShawRelative, ("shaw", "shaw_relative")),
    (RelPosXL, ("transformer_xl", "relpos_xl")),
    (NoPE, ("none", "nope")),
)

__all__ = [cls.__name__ for cls, _ in BUILTIN]
