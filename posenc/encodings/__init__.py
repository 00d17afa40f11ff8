"""One module per family of encodings; importing this package registers them all."""

from .alibi import ALiBi
from .learned import Learned
from .none import NoPE
from .relative import RelativeBias
from .rotary import RoPE
from .sinusoidal import Sinusoidal, Sinusoidal2D

__all__ = ["ALiBi", "Learned", "NoPE", "RelativeBias", "RoPE", "Sinusoidal", "Sinusoidal2D"]
