"""The wheel a user installs: built from this checkout, installed into a fresh venv, used from outside the tree."""

from __future__ import annotations

import os
import shutil
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


def _copy_of_the_package_sources(tmp_path: Path) -> Path:
    """What the wheel is made of, copied: a build writes posenc.egg-info beside its sources, and a test
    never writes into the checkout."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "posenc", source / "posenc", ignore=shutil.ignore_patterns("__pycache__"))
    return source


@pytest.mark.skipif(sys.platform == "win32", reason="venv layout differs on Windows")
def test_wheel_installs_and_runs_outside_the_source_tree(tmp_path):
    pytest.importorskip("setuptools")
    source = _copy_of_the_package_sources(tmp_path)
    dist = tmp_path / "dist"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # No build isolation: the setuptools of this environment, no network.
    pip_wheel = [
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(dist),
        str(source),
    ]
    _run([sys.executable, *pip_wheel], tmp_path, env)
    (wheel,) = dist.glob("posenc-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "posenc/py.typed" in names
    assert any(n.endswith("licenses/LICENSE") for n in names), "the wheel must carry the LICENSE"
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    python = venv / "bin" / "python"
    # torch and einops come from this environment's site-packages (a path in a .pth file: the .pth
    # files there, such as an editable posenc's, are not run), so the wheel is the only posenc.
    new_site = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path
    )
    parents = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    Path(new_site.strip(), "parent-env.pth").write_text("\n".join(sorted(parents)) + "\n")
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], tmp_path, env)
    away = tmp_path / "elsewhere"
    away.mkdir()
    where = _run([str(python), "-c", SNIPPET], away, env).strip()
    assert Path(where).is_relative_to(venv), f"imported posenc from {where}, not the installed wheel"
    assert "usage" in _run([str(venv / "bin" / "posenc"), "--help"], away, env).lower()


def test_sdist_carries_what_readme_links_to_and_the_build_warns_of_no_license(tmp_path):
    """What ``python -m build`` does first (.ci/run runs it): the sdist, through setuptools' own build
    hook (no isolation: no network), from a copy of the tracked tree; no license deprecation."""
    pytest.importorskip("setuptools")
    source = tmp_path / "source"
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=False, timeout=60
    )
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    for name in tracked.stdout.split("\0"):
        if name and (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    dist = tmp_path / "dist"
    hook = (
        "import sys, warnings\n"
        "warnings.simplefilter('always')\n"
        "from setuptools import build_meta\n"
        "print(build_meta.build_sdist(sys.argv[1]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", hook, str(dist)],
        cwd=source,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    log = (done.stdout + done.stderr).lower()
    assert "deprecat" not in log, log[-3000:]  # e.g. `project.license` as a table, license classifiers
    (sdist,) = dist.glob("posenc-*.tar.gz")
    import tarfile

    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in (
        "LICENSE",
        "README.md",
        "pyproject.toml",
        "posenc/py.typed",
        "examples/drop_in.py",
        "docs/study.md",
    ):
        assert needed in names, f"the sdist lacks {needed}"
    assert not any(n.endswith((".pt", ".pyc")) for n in names)


def test_ci_builds_a_wheel_and_an_sdist():
    """.ci/run runs ``python -m build`` and fails on a license warning (the check above, with isolation)."""
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python -m build" in script and "licen" in script


@pytest.mark.skipif(sys.platform == "win32", reason="venv layout differs on Windows")
def test_editable_install_is_a_path_type_checkers_follow(tmp_path):
    """README's ``pip install -e``: a plain path in a .pth file (mypy run outside the checkout finds
    ``posenc`` and its py.typed), not setuptools' import hook, which type checkers cannot see."""
    pytest.importorskip("setuptools")
    source = _copy_of_the_package_sources(tmp_path)
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    python = venv / "bin" / "python"
    new_site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path
        ).strip()
    )
    # setuptools, torch and einops from this environment (its .pth files are not run: see above)
    parents = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    (new_site / "parent-env.pth").write_text("\n".join(sorted(parents)) + "\n")
    install = ["install", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-e", str(source)]
    _run([sys.executable, "-m", "pip", "--python", str(python), *install], tmp_path, env)
    (pth,) = new_site.glob("__editable__*posenc*.pth")
    assert pth.read_text().split() == [str(source)], pth.read_text()
    away = tmp_path / "elsewhere"
    away.mkdir()
    where = _run([str(python), "-c", "import posenc; print(posenc.__file__)"], away, env).strip()
    assert Path(where) == source / "posenc" / "__init__.py"
    assert (source / "posenc" / "py.typed").is_file()
