"""posenc: position encodings for attention models behind one interface and a registry.

>>> import posenc
>>> rope = posenc.build("rope(base=500000.0)", head_dim=64)
>>> q, k = rope.encode_qk(q, k)          # doctest: +SKIP

Every public name is imported on first use (PEP 562), so ``import posenc`` and the
``posenc`` command's ``--help`` do not import torch; ``posenc.X`` and ``from posenc import X``
work as with eager imports. A new public name goes into ``_HOME``, ``__all__`` and the
``TYPE_CHECKING`` block below.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # what __getattr__ below provides, for type checkers and IDEs
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
        QueryTemperature,
        RelativeBias,
        RelPosXL,
        RoPE,
        ShawRelative,
        Sinusoidal,
        Sinusoidal2D,
        XPos,
    )
    from .hf import from_hf_config, from_hf_model
    from .masking import document_positions
    from .registry import Spec, available, build, describe, register

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

_ENCODINGS = (
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
)

#: The submodule each exported name lives in (submodules themselves are found by name;
#: ``attention`` is the property of ``_Package`` below).
_HOME: dict[str, str] = {
    **dict.fromkeys(_ENCODINGS, "encodings"),
    "PositionalEncoding": "base",
    "mask_to_positions": "base",
    "from_hf_config": "hf",
    "from_hf_model": "hf",
    "document_positions": "masking",
    "Spec": "registry",
    "available": "registry",
    "build": "registry",
    "describe": "registry",
    "register": "registry",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)  # posenc.registry imports the built-in encodings, which register themselves
    try:
        if home is not None:
            value = getattr(importlib.import_module(f".{home}", __name__), name)
        elif (
            name.isidentifier()
            and not name.startswith("__")
            and importlib.util.find_spec(f"{__name__}.{name}") is not None
        ):
            value = importlib.import_module(f".{name}", __name__)  # a submodule: posenc.nn, posenc.hf, ...
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    except ModuleNotFoundError as err:
        if err.name not in _REQUIRED:
            raise
        # `import posenc` itself needs nothing; the names do: say which package, not a line of base.py.
        raise ModuleNotFoundError(
            f"posenc.{name} needs {err.name}, which is not installed in this Python ({sys.executable}): "
            f"pip install {err.name}",
            name=err.name,
        ) from err
    globals()[name] = value  # later lookups skip this function
    return value


#: What the public names import (``pyproject.toml``'s dependencies that are imported at runtime).
_REQUIRED = ("torch", "einops")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """The type of the ``posenc`` module: ``posenc.attention`` is always the function.

    The function shares its name with the submodule ``posenc.attention``, and the import
    system sets a package's attribute to each submodule it loads (``posenc.nn`` imports
    ``posenc.attention``). With eager imports the function was bound after that; imported
    lazily, this property keeps the function in place whatever is imported when.
    """

    @property
    def attention(self) -> Any:
        assigned = self.__dict__.get("_assigned_attention")  # a user's own `posenc.attention = ...`
        return assigned or importlib.import_module(".attention", __name__).attention

    @attention.setter
    def attention(self, value: Any) -> None:
        if isinstance(value, types.ModuleType) and value.__name__ == f"{__name__}.attention":
            return  # the import system storing the submodule: the function stays
        self.__dict__["_assigned_attention"] = value  # e.g. a test's monkeypatch, undone the same way


sys.modules[__name__].__class__ = _Package
