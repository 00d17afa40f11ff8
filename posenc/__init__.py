"""posenc: position encodings for attention models behind one interface and a registry.

>>> import posenc
>>> rope = posenc.build("rope(base=500000.0)", head_dim=64)
>>> q, k = rope.encode_qk(q, k)          # doctest: +SKIP

Public names are imported on first use (PEP 562): ``import posenc`` and the ``posenc`` command's
``--help`` import no torch (0.05 s instead of ~1.7 s on 2 cores). ``_HOME`` says where each name
lives; a new public name goes there and into the ``TYPE_CHECKING`` block (a test checks they agree).
The built-in encodings are registered in :mod:`posenc.registry`, from :data:`posenc.encodings.BUILTIN`.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

if TYPE_CHECKING:  # what __getattr__ provides, for type checkers and IDEs
    from . import distributed, functional, hf, nn, registry
    from ._positions import mask_to_positions
    from .attend import attention
    from .base import PositionalEncoding
    from .encodings import (
        FIRE,
        KERPLE,
        ALiBi,
        AxialRoPE,
        Learned,
        Learned2D,
        MRoPE,
        NoPE,
        QueryTemperature,
        RelativeBias,
        RelPosXL,
        RoPE,
        ShawRelative,
        Sinusoidal,
        Sinusoidal2D,
        XPos,
    )
    from .functional import mrope_positions
    from .hf import from_hf_config, from_hf_model
    from .masking import document_positions
    from .registry import Spec, available, build, describe, register

_ENCODINGS = "FIRE KERPLE ALiBi AxialRoPE Learned Learned2D MRoPE NoPE QueryTemperature RelPosXL RelativeBias RoPE ShawRelative Sinusoidal Sinusoidal2D XPos"

#: Each public name and the module it lives in (a submodule's home is itself).
_HOME: dict[str, str] = {
    **dict.fromkeys(_ENCODINGS.split(), "encodings"),
    "PositionalEncoding": "base",
    "mask_to_positions": "_positions",
    "attention": "attend",
    "document_positions": "masking",
    **dict.fromkeys(("from_hf_config", "from_hf_model"), "hf"),
    "mrope_positions": "functional",
    **dict.fromkeys(("Spec", "available", "build", "describe", "register"), "registry"),
    **{sub: sub for sub in ("distributed", "functional", "hf", "nn", "registry")},
}

__all__ = ["__version__", *_HOME]

#: What the public names import (pyproject.toml's runtime dependencies).
_REQUIRED = ("torch", "einops")


def __getattr__(name: str) -> Any:
    if (home := _HOME.get(name)) is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(f".{home}", __name__)
    except ModuleNotFoundError as err:
        if err.name not in _REQUIRED:
            raise
        # `import posenc` itself needs nothing; the names do: say which package, not a line of base.py.
        raise ModuleNotFoundError(
            f"posenc.{name} needs {err.name}, which is not installed in this Python ({sys.executable}): "
            f"pip install {err.name}",
            name=err.name,
        ) from err
    value = module if home == name else getattr(module, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
