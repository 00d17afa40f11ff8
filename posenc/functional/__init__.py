"""Pure tensor functions: tables, frequencies, slopes, buckets, rotation. No module state.

Every formula is written once here and used by the modules in :mod:`posenc.encodings`
and by the tests' properties.
"""

from .alibi import *  # noqa: F403
from .axial import *  # noqa: F403
from .mrope_positions import *  # noqa: F403
from .relative import *  # noqa: F403
from .rope_freqs import *  # noqa: F403
from .rope_layout import *  # noqa: F403
from .rope_scaling import *  # noqa: F403
from .rotary import *  # noqa: F403
from .shaw import *  # noqa: F403
from .sinusoidal import *  # noqa: F403
