"""The library's imports run one way: each module imports only modules of its own level or below.

The levels are README's layout map (Development): a newcomer can trust that map because this test
reads every ``import`` of ``posenc/`` (outside ``TYPE_CHECKING`` blocks) and fails on one that goes up.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Module (or package) prefix -> level, as README lists them; the longest prefix wins.
LEVELS = {
    "posenc": 8,  # the public names, lazily from everywhere: only the application imports them so
    "posenc._checks": 1,
    "posenc._compat": 1,
    "posenc.functional": 2,
    "posenc.state": 3,
    "posenc._positions": 3,
    "posenc.base": 3,
    "posenc.encodings": 4,
    "posenc.registry": 5,
    "posenc._spec": 5,
    "posenc.masking": 6,
    "posenc.attend": 6,
    "posenc._attention_paths": 6,
    "posenc._flex": 6,
    "posenc.distributed": 6,
    "posenc.nn": 7,
    "posenc.hf": 7.2,  # its __init__, above its modules
    # posenc.hf's own order (README): each module imports only those above it
    **{
        f"posenc.hf.{name}": 7 + i / 100
        for i, name in enumerate(
            "_read _rope _speech _layer_types _vision _layers _bias _table _rule configs weights".split(), 1
        )
    },
    "posenc.app": 8,
    "posenc.__main__": 8,
}


def level(module: str) -> int:
    prefixes = [p for p in LEVELS if module == p or module.startswith(p + ".")]
    if not prefixes:
        raise AssertionError(f"{module} has no level in tests/test_imports.py (and none in README's map)")
    return LEVELS[max(prefixes, key=len)]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every posenc import outside ``if TYPE_CHECKING:`` blocks."""
    module = _module_name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: list[tuple[int, str]] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                target = ".".join([*base, node.module] if node.module else base)
                for alias in node.names:  # `from . import x` may import the submodule x
                    sub = f"{target}.{alias.name}"
                    is_module = (ROOT / sub.replace(".", "/")).is_dir() or (
                        ROOT / (sub.replace(".", "/") + ".py")
                    ).exists()
                    found.append((node.lineno, sub if is_module else target))
            elif isinstance(node, ast.Import):
                found.extend((node.lineno, alias.name) for alias in node.names)
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    visit([child])

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return [(line, target) for line, target in found if target.split(".")[0] == "posenc"]


MODULES = sorted((ROOT / "posenc").rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[_module_name(p) for p in MODULES])
def test_imports_run_one_way(path):
    module = _module_name(path)
    if module == "posenc":
        return  # the package imports lazily, on first use of a name
    upward = [
        f"line {line}: {target} (level {level(target)})"
        for line, target in _runtime_imports(path)
        if level(target) > level(module)
    ]
    assert not upward, f"{module} (level {level(module)}) imports upward: {upward}"


def _code_lines(path: Path) -> int:
    """Lines holding code: no blank lines, comments or docstrings (the count issue #24 measures by)."""
    import io
    import tokenize

    lines: set[int] = set()
    after_statement = True  # a string that opens a statement is a docstring
    for token in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if token.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            after_statement = True
        elif token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.ENDMARKER):
            if not (token.type == tokenize.STRING and after_statement):
                lines.update(range(token.start[0], token.end[0] + 1))
            after_statement = False
    return len(lines)


LIBRARY = [p for p in MODULES if "app" not in p.relative_to(ROOT).parts]


@pytest.mark.parametrize("path", LIBRARY, ids=[_module_name(p) for p in LIBRARY])
def test_no_library_module_is_over_400_code_lines(path):
    """Files are cut by concept; one past 400 code lines holds two (README's layout map names them)."""
    assert _code_lines(path) <= 400, f"{_module_name(path)}: {_code_lines(path)} code lines"


def test_the_code_line_count_skips_docstrings_comments_and_blanks(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('"""Doc."""\n\n# a comment\ndef f():\n    """Doc\n    two."""\n    return "x"  # why\n')
    assert _code_lines(source) == 2
