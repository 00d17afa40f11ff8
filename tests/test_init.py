"""``import posenc`` is lazy (PEP 562): the command's help needs no torch, every public name still resolves.

Each check runs in a fresh interpreter: in the test process torch and posenc are long imported.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def run_python(code: str) -> str:
    """Run ``code`` in a fresh interpreter; its stdout (a failure shows its stderr)."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["--version"], ["extrapolate", "--help"], ["extend", "--help"], ["plot", "--help"]],
    ids=" ".join,
)
def test_the_command_help_imports_no_torch(argv):
    out = run_python(
        f"""
        import contextlib, io, runpy, sys
        sys.argv = ["posenc", *{argv!r}]
        with contextlib.redirect_stdout(io.StringIO()) as text, contextlib.suppress(SystemExit):
            runpy.run_module("posenc", run_name="__main__")  # python -m posenc ...
        assert "posenc" in text.getvalue(), text.getvalue()
        print(sorted(m for m in ("torch", "numpy", "matplotlib") if m in sys.modules))
        """
    )
    assert out.splitlines()[-1] == "[]"


def test_import_posenc_and_its_version_import_no_torch():
    out = run_python(
        """
        import sys
        import posenc, posenc.app.cli, posenc.app.study
        from posenc import __version__
        posenc.app.study.StudyConfig  # what the command's help reads
        print(__version__, "torch" in sys.modules)
        """
    )
    assert out.split() == [_pyproject_version(), "False"]


def _pyproject_version() -> str:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    return re.search(r'^version = "([^"]+)"', text, re.M).group(1)


def test_type_checkers_see_every_lazy_name():
    """The TYPE_CHECKING block (what mypy and IDEs read) imports exactly the names of ``_HOME``."""
    import ast
    from pathlib import Path

    import posenc

    tree = ast.parse(Path(posenc.__file__).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    imported = {alias.asname or alias.name for node in block.body for alias in node.names}
    assert imported == set(posenc._HOME)


def test_every_public_name_resolves_and_star_import_gives_them_all():
    out = run_python(
        """
        import importlib, types
        import posenc
        namespace = {}
        exec("from posenc import *", namespace)
        missing = sorted(set(posenc.__all__) - set(namespace))
        assert not missing, missing
        for name in posenc.__all__:
            value = getattr(posenc, name)
            assert value is not None and namespace[name] is value, name
            home = posenc._HOME.get(name)
            if home not in (None, name):  # the very object of its module, not a copy
                assert value is getattr(importlib.import_module("posenc." + home), name), name
        for name in ("nn", "functional", "distributed", "hf", "registry"):
            assert isinstance(getattr(posenc, name), types.ModuleType), name
        assert posenc.RoPE is posenc.encodings.rope.RoPE
        # the lazy table repeats the encodings' exports (it cannot import them): they must agree
        assert {n for n, home in posenc._HOME.items() if home == "encodings"} == set(posenc.encodings.__all__)
        assert posenc.attention.__module__ == "posenc.attend"
        assert set(posenc.__all__) <= set(dir(posenc))
        assert not hasattr(posenc, "no_such_name")
        try:
            posenc.no_such_name
        except AttributeError as err:
            assert "no_such_name" in str(err)
        print("ok")
        """
    )
    assert out.strip() == "ok"


def test_attention_is_the_function_whatever_is_imported_first():
    out = run_python(
        """
        import posenc.nn, posenc.attend
        import posenc
        assert posenc.attention is posenc.attend.attention, posenc.attention
        print(type(posenc.attention).__name__)
        """
    )
    assert out.strip() == "function"


def test_the_registry_alone_knows_every_built_in_encoding():
    """``import posenc.registry`` (never touching ``posenc.X``) finds the built-ins, as ``posenc.build`` does."""
    out = run_python(
        """
        import sys
        import posenc.registry as registry
        alone = registry.available()
        rope = registry.build("rope", head_dim=8)
        assert type(rope).__name__ == "RoPE", rope
        import posenc.encodings  # every built-in module, loaded explicitly
        assert registry.available() == alone, (alone, registry.available())
        print(len(alone))
        """
    )
    assert int(out.strip()) >= 16  # one name per class in posenc.encodings at least


def test_a_user_registration_sees_the_built_in_names_first():
    """Taking "rope" before anything posenc registered was loaded must still be a name clash."""
    out = run_python(
        """
        from posenc.registry import register
        from posenc.base import PositionalEncoding
        class Mine(PositionalEncoding):
            kind = "none"
        try:
            register("rope")(Mine)
        except ValueError as err:
            print("clash" if "rope" in str(err) else err)
        """
    )
    assert out.strip() == "clash"


def test_a_name_without_torch_installed_says_what_to_install():
    """Without torch, ``import posenc`` works and a public name asks for torch by name."""
    out = run_python(
        """
        import sys
        sys.modules["torch"] = None  # as if torch were not installed
        import posenc
        try:
            posenc.RoPE
        except ModuleNotFoundError as err:
            print(err.name, "|", err)
        """
    )
    name, message = out.strip().split(" | ")
    assert name == "torch"
    assert (
        message.startswith("posenc.RoPE needs torch, which is not installed")
        and "pip install torch" in message
    )
