"""The application is a layer on top: ``posenc.app`` uses only posenc's public API, and the library
never imports ``posenc.app``.

Read from the source with :mod:`ast` (nothing is imported to find the imports):

* every module under ``posenc/app`` imports, from the library (``posenc`` outside ``posenc.app``),
  only public names: no module part and no imported name starting with ``_`` (dunders such as
  ``__version__`` are public), only ``posenc`` itself and its public submodules (those in
  ``posenc.__all__``), and only names in that module's ``__all__`` (its public names where it has
  none);
* no module outside ``posenc/app`` imports ``posenc.app``, except ``posenc/__main__.py``, the
  entry point of ``python -m posenc`` (the command), which nothing imports.

Within the application, its own private modules and names (``posenc.app.cli._common``, ...) are its
own business.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import posenc

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "posenc"
APP = PACKAGE / "app"
#: The command's entry point (``python -m posenc``): it runs the application, and nothing imports it.
ENTRY_POINTS = {PACKAGE / "__main__.py"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, source: str | None = None) -> Iterator[tuple[int, str, list[str]]]:
    """``(line, absolute module, imported names)`` for every import in ``path`` (``[]`` for ``import x``)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    text = path.read_text(encoding="utf-8") if source is None else source
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield node.lineno, target, [alias.name for alias in node.names]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _in_app(module: str) -> bool:
    return module == "posenc.app" or module.startswith("posenc.app.")


def _library(module: str) -> bool:
    return (module == "posenc" or module.startswith("posenc.")) and not _in_app(module)


#: posenc's public submodules: the modules among the names of ``posenc.__all__``.
PUBLIC_SUBMODULES = {f"posenc.{name}" for name in posenc.__all__ if posenc._HOME.get(name) == name}

APP_FILES = sorted(APP.rglob("*.py"))
LIBRARY_FILES = sorted(set(PACKAGE.rglob("*.py")) - set(APP_FILES))


def test_the_files_are_found():
    assert {"__init__.py", "cli", "study", "plots"} <= {p.relative_to(APP).parts[0] for p in APP_FILES}
    assert PACKAGE / "registry.py" in LIBRARY_FILES and not any(
        _in_app(_module_name(p)) for p in LIBRARY_FILES
    )
    assert {"posenc.registry", "posenc.nn", "posenc.functional"} <= PUBLIC_SUBMODULES


def _app_violations(path: Path, source: str | None = None) -> list[str]:
    found = []
    for line, module, names in _imports(path, source):
        if not _library(module):
            continue
        where = f"{path.relative_to(ROOT)}:{line}: {module}"
        if any(_private(part) for part in module.split(".")):
            found.append(f"{where} is a private module")
            continue
        if module != "posenc" and module not in PUBLIC_SUBMODULES:
            found.append(f"{where} is not posenc or one of its public submodules {sorted(PUBLIC_SUBMODULES)}")
            continue
        imported = importlib.import_module(module)
        # posenc.functional has no __all__: its public names are what its star imports bring.
        public = set(getattr(imported, "__all__", [n for n in vars(imported) if not _private(n)]))
        for name in names:
            if _private(name) or (name not in public and f"{module}.{name}" not in PUBLIC_SUBMODULES):
                found.append(f"{where} imports {name!r}, not in {module}.__all__")
    return found


@pytest.mark.parametrize("path", APP_FILES, ids=lambda p: str(p.relative_to(APP)))
def test_the_app_imports_only_public_names(path):
    assert _app_violations(path) == []


@pytest.mark.parametrize("path", LIBRARY_FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_library_never_imports_the_app(path):
    if path in ENTRY_POINTS:
        pytest.skip("the entry point of python -m posenc runs the command")
    imported = [
        f"{line}: {module}"
        for line, module, names in _imports(path)
        if _in_app(module) or (module == "posenc" and "app" in names)
    ]
    assert imported == []


def test_the_rest_of_the_tree_imports_the_app_only_as_the_app():
    """Outside posenc/: benchmarks never import the app (tests and examples may, as users do)."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted((ROOT / "benchmarks").rglob("*.py"))
        for line, module, names in _imports(path)
        if _in_app(module) or (module == "posenc" and "app" in names)
    ]
    assert offenders == []


def test_the_checker_catches_a_private_import():
    """The check itself: a private module, a private name and a name outside ``__all__`` are each caught."""
    fake = APP / "study" / "_layering_probe.py"
    source = (
        "from .. import _checks\n"  # the app's own private module: allowed
        "from posenc._checks import check_bool\n"
        "from ...registry import _show\n"
        "from posenc.base import PositionalEncoding\n"
        "from posenc.registry import lookup, Spec\n"
        "from posenc import RoPE, __version__, nn\n"
        "import posenc.encodings.rotary\n"
    )
    found = _app_violations(fake, source)
    assert [f.split(": ", 1)[1] for f in found] == [
        "posenc._checks is a private module",
        "posenc.registry imports '_show', not in posenc.registry.__all__",
        f"posenc.base is not posenc or one of its public submodules {sorted(PUBLIC_SUBMODULES)}",
        f"posenc.encodings.rotary is not posenc or one of its public submodules {sorted(PUBLIC_SUBMODULES)}",
    ]
