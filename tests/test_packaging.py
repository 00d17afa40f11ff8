"""The wheel a user installs: built from this checkout, installed into a fresh venv, used from outside the tree."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SNIPPET = textwrap.dedent(
    """
    import posenc, torch
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    q2, k2 = posenc.build("rope", head_dim=8)(q, k)
    scores = posenc.ALiBi(2)(q2 @ k2.transpose(-1, -2))
    assert scores.shape == (1, 2, 5, 5)
    print(posenc.__file__)
    """
)


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="venv layout differs on Windows")
def test_wheel_installs_and_runs_outside_the_source_tree(tmp_path):
    pytest.importorskip("setuptools")
    dist = tmp_path / "dist"
    # No build isolation: the setuptools of this environment, no network.
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(ROOT),
        ],
        tmp_path,
    )
    (wheel,) = dist.glob("posenc-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "posenc/py.typed" in names
    assert any(n.endswith("licenses/LICENSE") for n in names), "the wheel must carry the LICENSE"
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    # torch and einops come from this environment's site-packages (a path in a .pth file: the .pth
    # files there, such as an editable posenc's, are not run), so the wheel is the only posenc.
    new_site = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path
    )
    parents = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    Path(new_site.strip(), "parent-env.pth").write_text("\n".join(sorted(parents)) + "\n")
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], tmp_path)
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = _run([str(python), "-c", SNIPPET], away, env).strip()
    assert Path(where).is_relative_to(venv), f"imported posenc from {where}, not the installed wheel"
    assert "usage" in _run([str(venv / "bin" / "posenc"), "--help"], away, env).lower()
