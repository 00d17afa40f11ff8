"""The ``posenc`` command: the study end to end, one-line errors with exit code 2, list and describe."""

from __future__ import annotations

import csv
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import posenc
from posenc.app.cli import main
from posenc.app.cli._common import _FLAGS, _in_flags
from posenc.app.study import ConfigError, StudyConfig, StudyResult, default_encodings


@pytest.fixture(autouse=True)
def _in_a_fresh_folder(tmp_path, monkeypatch):
    """Every test runs in its own empty folder: none reads or writes the working directory."""
    monkeypatch.chdir(tmp_path)


#: A study small enough for a unit test: about a second per encoding on a loaded 2-core CPU.
TINY_ARGS = [
    "--train-len", "16", "--eval-lens", "16,32", "--steps", "3", "--batch-size", "4",
    "--d-model", "16", "--num-layers", "1", "--num-heads", "2", "--quiet",
]  # fmt: skip


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """``main(argv)`` in this process; argparse's own exits become return codes."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def corpus_file(tmp_path: Path) -> Path:
    """6,000 characters of code-like text: enough for a split with 600 validation characters."""
    lines = [f"def f{i}(x):\n    return x * {i % 7} + {i % 3}\n" for i in range(400)]
    path = tmp_path / "corpus.txt"
    path.write_text("".join(lines)[:6000], encoding="utf-8")
    return path


# --- extrapolate ---------------------------------------------------------------------------------------


def test_extrapolate_end_to_end_prints_the_table_and_writes_the_files(corpus_file, tmp_path, capsys):
    out = tmp_path / "results"
    code, stdout, stderr = run(
        ["extrapolate", "--corpus", str(corpus_file), "--out", str(out), *TINY_ARGS], capsys
    )
    assert code == 0, stderr
    assert f"corpus: {corpus_file}: 6,000 characters" in stdout
    names = default_encodings()
    # The plan says which registered encodings run and why the others do not.
    assert "skip sinusoidal2d" in stdout
    for name in names:
        assert f"run  {name}" in stdout

    table = stdout[stdout.index("validation perplexity") :].splitlines()
    at = next(i for i, line in enumerate(table) if line.startswith("encoding"))
    assert table[at].split()[1:] == ["16", "(train)", "32"]
    rows = {line.split()[0]: line.split()[1:] for line in table[at + 2 : at + 2 + len(names)]}
    assert set(rows) == set(names)
    assert rows["learned"][1:] == ["cannot", "run"]
    for name in set(names) - {"learned"}:
        assert all(float(cell) > 1.0 for cell in rows[name]), rows[name]

    # the data, the figure, and each model's checkpoint
    checkpoints = {f"model-{name}.pt" for name in names}
    assert {p.name for p in out.iterdir()} == {
        "results.json",
        "results.csv",
        "extrapolation.png",
        *checkpoints,
    }
    data = json.loads((out / "results.json").read_text())
    assert data["pending"] == []
    # The printed table and the JSON agree to the printed precision.
    for enc in data["encodings"]:
        for r, cell in zip(enc["lengths"], rows[enc["label"]], strict=False):
            if r["perplexity"] is not None:
                assert f"{r['perplexity']:.3f}" == cell
    with (out / "results.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == 2 * len(names)


def test_the_characters_scored_are_said_as_scored_when_the_corpus_is_small(corpus_file, tmp_path, capsys):
    """6,000 characters: 600 validation characters hold 18 windows of 32, not the 16,384 --eval-chars asks."""
    from posenc.app.plots import extrapolation_figure

    out = tmp_path / "o"
    argv = ["extrapolate", "--corpus", str(corpus_file), "--out", str(out), "--encodings", "rope", *TINY_ARGS]
    code, stdout, stderr = run(argv, capsys)
    assert code == 0, stderr
    assert "(5,400 train, 600 validation)" in stdout
    assert (
        "evaluation: 576 characters scored per length (fewer than the 16,384 asked for: 18 whole windows of "
        "32 fit in the validation text)"
    ) in stdout
    assert "576 characters scored per length" in " ".join(
        stdout[stdout.index("validation perplexity") :].split()
    )
    data = json.loads((out / "results.json").read_text())
    assert {r["chars"] for e in data["encodings"] for r in e["lengths"]} == {576}
    title = extrapolation_figure(StudyResult.from_dict(data))._suptitle.get_text()
    assert "576 validation characters scored per length" in title and "16,384" not in title


def test_a_corpus_too_short_is_refused_before_the_plan_is_printed(tmp_path, capsys):
    (tmp_path / "one.txt").write_text("one line\n", encoding="utf-8")
    code, stdout, stderr = run(["extrapolate", "--corpus", "one.txt"], capsys)
    assert code == 2 and stdout == ""
    assert stderr == (
        "posenc extrapolate: error: --corpus: the training text has 9 characters; train_len=64 needs at least 66\n"
    )
    code, stdout, stderr = run(["extend", "--corpus", "one.txt"], capsys)
    assert code == 2 and stdout == ""
    assert "posenc extend: error: --corpus: the training text has 9 characters" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.txt"]  # no --out folder left behind


def test_extrapolate_accepts_specs_with_commas_inside(corpus_file, tmp_path, capsys):
    spec = "rope(base=500.0, scaling={'rope_type': 'linear', 'factor': 2.0}),alibi(max_bias=4.0)"
    code, _, stderr = run(
        [
            "extrapolate",
            "--corpus",
            str(corpus_file),
            "--out",
            str(tmp_path / "o"),
            "--encodings",
            spec,
            *TINY_ARGS,
        ],
        capsys,
    )
    assert code == 0, stderr
    labels = [e["label"] for e in json.loads((tmp_path / "o" / "results.json").read_text())["encodings"]]
    assert labels == [
        "rope(base=500.0, scaling={'rope_type': 'linear', 'factor': 2.0})",
        "alibi(max_bias=4.0)",
    ]


def test_same_seed_gives_the_same_results_file(corpus_file, tmp_path, capsys):
    def numbers(out: Path) -> list:
        data = json.loads((out / "results.json").read_text())
        return [(e["label"], e["final_train_loss"], e["lengths"]) for e in data["encodings"]]

    for name in ("a", "b"):
        argv = ["extrapolate", "--corpus", str(corpus_file), "--out", str(tmp_path / name), "--seed", "7"]
        assert run([*argv, "--encodings", "rope,t5", *TINY_ARGS], capsys)[0] == 0
    assert numbers(tmp_path / "a") == numbers(tmp_path / "b")


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--encodings", "ropee"], "unknown position encoding 'ropee'. Did you mean 'rope'?"),
        (["--encodings", "rope(bass=2.0)"], "rope: unknown option(s) 'bass'"),
        (["--encodings", "rope(base=1"], "error: --encodings 'rope(base=1' is not a comma-separated list"),
        (
            ["--encodings", "alibi,,rope"],
            "error: --encodings 'alibi,,rope' has a comma with nothing before it",
        ),
        (["--eval-lens", "32,128", "--train-len", "64"], "--eval-lens: length 32 is below --train-len=64"),
        (["--corpus", "/no/such/corpus.txt"], "error: --corpus path '/no/such/corpus.txt' does not exist"),
        (["--corpus", "EMPTY"], "holds no text"),
        (["--corpus", "BINARY"], "is not UTF-8 text"),
        (["--steps", "0"], "argument --steps: expected a positive integer, got '0'"),
        (["--steps", "-3"], "argument --steps: expected a positive integer, got '-3'"),
        (["--train-len", "0"], "argument --train-len: expected a positive integer, got '0'"),
        (["--eval-lens", "64,-128"], "argument --eval-lens: expected a positive integer, got '-128'"),
        (["--eval-lens", "64,x"], "argument --eval-lens: expected a positive integer, got 'x'"),
        (["--batch-size", "0"], "argument --batch-size: expected a positive integer"),
        (["--lr", "0"], "argument --lr: expected a positive finite number, got '0'"),
        (["--seed", "-1"], "argument --seed: expected a non-negative integer, got '-1'"),
        (["--seed", "x"], "argument --seed: expected a non-negative integer, got 'x'"),
        (["--lr", "inf"], "argument --lr: expected a positive finite number, got 'inf'"),
        (["--device", "warp-drive"], "error: --device 'warp-drive' is not a torch device"),
        (["--d-model", "30"], "error: --d-model=30 must be divisible by --num-heads=4"),
        (["--out", "A_FILE"], "--out "),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
    ],
)
def test_bad_options_print_one_line_and_exit_2(argv, fragment, tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "binary.dat").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    (tmp_path / "a_file").write_text("x")
    replace = {
        "EMPTY": tmp_path / "empty.txt",
        "BINARY": tmp_path / "binary.dat",
        "A_FILE": tmp_path / "a_file",
    }
    argv = [str(replace.get(a, a)) for a in argv]
    code, stdout, stderr = run(["extrapolate", *argv], capsys)
    assert code == 2
    assert stderr.count("\n") == 1 and stderr.startswith("posenc extrapolate: error: "), stderr
    assert fragment in stderr
    assert "Traceback" not in stderr and "validation perplexity" not in stdout


def test_a_bad_option_in_a_real_process_exits_2_without_a_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "posenc", "extrapolate", "--eval-lens", "16,512", "--train-len", "64"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "posenc extrapolate: error: --eval-lens: length 16 is below --train-len=64; "
        "evaluation lengths must be >= the training length"
    )
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_closed_pipe_ends_quietly():
    """``posenc list | head -1``: the reader leaves early; no BrokenPipeError traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "posenc", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the command writes its first line
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert stderr == ""


@pytest.mark.parametrize(
    ("error", "reported"),
    [
        (
            ConfigError("steps must be a positive int, got 0", argument="steps"),
            "--steps must be a positive int, got 0",
        ),
        (
            ConfigError("d_model=30 must be divisible by num_heads=4", argument="d_model"),
            "--d-model=30 must be divisible by --num-heads=4",
        ),
        (
            ConfigError("out_dir 'x' exists and is not a folder", argument="out_dir"),
            "--out 'x' exists and is not a folder",
        ),
        # the user's own text is echoed as typed
        (
            ConfigError("encodings: 't5(num_heads=3)': bad", argument="encodings"),
            "--encodings: 't5(num_heads=3)': bad",
        ),
        (ConfigError("text is empty", argument="text"), "text is empty"),
        (ConfigError("something else"), "something else"),
    ],
)
def test_library_errors_are_reported_with_flag_names(error, reported):
    assert _in_flags(error) == reported


def test_every_flag_named_for_library_errors_is_an_option(capsys):
    from posenc.app.study import ExtendConfig

    study, extend = set(StudyConfig.__dataclass_fields__), set(ExtendConfig.__dataclass_fields__)
    assert study <= set(_FLAGS)  # every setting has its flag
    assert set(_FLAGS) - extend == {"corpus", "encodings", "out_dir", "model", "resume"}
    for command, extra in (("extrapolate", {"methods", "factor", "finetune_steps", "finetune_lr", "baselines", "model"}),
                           ("extend", {"encodings"})):  # fmt: skip
        code, help_text, _ = run([command, "--help"], capsys)
        assert code == 0
        for name, flag in _FLAGS.items():
            if name not in extra:
                assert f"{flag} " in help_text, (command, flag)


#: Bad command lines of every class: each must give exit code 2 and exactly one stderr line,
#: before any training (the study settings are tiny, so a missed check would train and exit 0).
BAD_ARGV = [
    ["extrapolate", "--device", "meta"],
    ["extrapolate", "--device", "xla"],
    ["extrapolate", "--device", "cuda:99"],
    ["extend", "--device", "meta"],
    ["extend", "--device", "warp-drive"],
    ["extrapolate", "--encodings", "rope,sinusoidal2d"],
    ["extrapolate", "--encodings", "learned(max_len=10000000000)"],
    ["extrapolate", "--encodings", "sinusoidal(offset=100000000000)"],
    ["extrapolate", "--encodings", "t5(max_distance=99999999999)"],
    ["extrapolate", "--encodings", "rope," * 20000],
    ["extrapolate", "--out", "A_FILE/sub"],
    ["extrapolate", "--out", "/proc/posenc-out"],
    ["extend", "--out", "A_FILE"],
    ["extend", "--out", "/proc/posenc-out"],
    ["extrapolate", "--batch-size", "100000"],
    ["extrapolate", "--batch-size", "4096", "--train-len", "4096", "--eval-lens", "4096"],
    ["extrapolate", "--threads", "100000"],
    ["extrapolate", "--d-model", "8192", "--num-layers", "200"],
    ["extrapolate", "--train-len", "9" * 5000],
    ["extrapolate", "--eval-lens", "16," + "9" * 100],
    ["extend", "--methods", "linear,bogus"],
    ["extend", "--methods", ""],
    ["extend", "--factor", "-2"],
    ["extend", "--factor", "nan"],
    ["extend", "--finetune-steps", "-1"],
    ["extend", "--baselines", "learned"],
    ["extend", "--baselines", "sinusoidal2d"],
    ["extend", "--baselines", "alibi,,none"],
    ["extend", "--model", "/no/such/model.pt"],
    ["extend", "--model", "A_FILE"],
    ["extend", "--eval-chars", "0"],
    ["plot", "rope", "--length", "100000000"],
    ["plot", "rope", "--d-model", "1000000"],
    ["plot", "rope", "--num-heads", "0"],
    ["plot", "learned(max_len=10000000000)"],
    ["plot", "rope", "--out", "/proc/rope.png"],
    ["plot", "rope", "--out", "A_FILE/rope.png"],
    ["plot", "x" * 1_000_000],
    ["describe", "x" * 1_000_000],
]


@pytest.mark.parametrize("argv", BAD_ARGV, ids=lambda argv: " ".join(argv)[:60])
def test_every_bad_input_is_one_line_and_exit_2(argv, corpus_file, tmp_path, capsys):
    (tmp_path / "a_file").write_text("x")
    argv = [a.replace("A_FILE", str(tmp_path / "a_file")) for a in argv]
    tiny = ["--corpus", str(corpus_file), *TINY_ARGS] if argv[0] in ("extrapolate", "extend") else []
    if argv[0] in ("extrapolate", "extend") and "--out" not in argv:
        tiny += ["--out", str(tmp_path / "out")]
    # the bad option last: it overrides the tiny default of the same flag
    code, stdout, stderr = run([argv[0], *tiny, *argv[1:]], capsys)
    assert code == 2, stderr
    assert stderr.count("\n") == 1 and f"posenc {argv[0]}: error: " in stderr, stderr
    assert len(stderr) < 800  # a huge input is never echoed whole
    assert "validation perplexity" not in stdout


def test_an_allocator_error_is_one_line(monkeypatch, capsys):
    import posenc.app.cli as cli

    def fail(args):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: " + "x" * 5000
        )

    monkeypatch.setitem(cli._COMMANDS, "list", fail)
    code, _, stderr = run(["list"], capsys)
    assert code == 2 and stderr.count("\n") == 1 and "out of memory" in stderr and len(stderr) < 400


def test_help_imports_neither_the_study_nor_the_plots():
    """`posenc --help` reads StudyConfig's defaults only: no training code, no plots, no matplotlib."""
    code = (
        "import sys\n"
        "from posenc.app.cli import main\n"
        "try:\n"
        "    main(['extrapolate', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = {'posenc.app.study.training', 'posenc.app.study.plan', 'posenc.app.plots', 'matplotlib'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_a_bad_number_is_refused_before_torch_is_imported():
    """``--steps -5`` is refused as fast as an unknown command: options are checked before torch loads."""
    code = (
        "import sys\n"
        "from posenc.app.cli import main\n"
        "try:\n"
        "    main(['extrapolate', '--steps', '-5'])\n"
        "except SystemExit as exit_:\n"
        "    print(exit_.code)\n"
        "print('torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["2", "False"], proc.stderr
    assert "argument --steps: expected a positive integer, got '-5'" in proc.stderr


#: Runs command lines (JSON, a list of argv lists) in one process as if the `cli` extra were not
#: installed: numpy, matplotlib and tqdm cannot be imported (torch then warns at import that it
#: cannot initialise NumPy). After each: a line "@@ <exit status>" on stdout and on stderr.
_WITHOUT_CLI_EXTRA = """
import json, sys
for name in ("numpy", "matplotlib", "tqdm"):
    sys.modules[name] = None  # importing it raises ModuleNotFoundError; find_spec says None
from posenc.app.cli import main
for argv in json.loads(sys.argv[1]):
    code = main(argv)
    for stream in (sys.stdout, sys.stderr):
        print(f"@@ {code}", file=stream, flush=True)
"""


def test_without_the_cli_extra_commands_run_without_numpy_warnings(corpus_file, tmp_path):
    import json

    runs = [
        ["plot", "rope", "--out", "rope.png"],  # imports torch: its warning would come here
        ["extrapolate", "--corpus", str(corpus_file), "--out", "o", "--encodings", "rope", *TINY_ARGS],
    ]
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_CLI_EXTRA, json.dumps(runs)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert proc.returncode == 0, proc.stderr
    plot, study, last = proc.stderr.split("@@ ")  # each run's stderr, then its exit status
    assert study.startswith("2\n") and last == "0\n", proc.stderr
    assert "NumPy" not in proc.stderr
    # one line: what is missing and how to install it; nothing claims a file was written
    assert plot == (
        "posenc plot: error: matplotlib is not installed (pip install 'posenc[cli]'); posenc plot draws with it\n"
    )
    assert "the data files are written, the figure is skipped" in study
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "model-rope.pt",
        "results.csv",
        "results.json",
    ]
    assert not (tmp_path / "rope.png").exists()


def test_no_command_is_a_usage_error(capsys):
    code, _, stderr = run([], capsys)
    assert code == 2 and stderr.count("\n") == 1 and "COMMAND" in stderr


# --- list and describe ---------------------------------------------------------------------------------


def canonical_names() -> list[str]:
    return sorted({posenc.describe(name)["name"] for name in posenc.available()})


def test_list_shows_each_encoding_once_with_aliases_and_kind(capsys):
    code, stdout, _ = run(["list"], capsys)
    assert code == 0
    rows = {
        line.split()[0]: line
        for line in stdout.splitlines()[1:]
        if line.strip() and not line.startswith(("posenc", " "))  # " ": a wrapped description
    }
    assert sorted(rows) == canonical_names()
    assert "``" not in stdout and ":func:" not in stdout  # docstring markup shown as plain text
    assert "-m_h * distance" in stdout
    assert max(map(len, stdout.splitlines())) <= 80  # not a terminal here: 80 columns
    for name in canonical_names():
        info = posenc.describe(name)
        assert info["kind"] in rows[name].split()
        for alias in info["aliases"]:
            assert alias in rows[name]


@pytest.mark.parametrize("name", sorted(posenc.available()))
def test_describe_prints_every_option_from_the_registry(name, capsys):
    info = posenc.describe(name)
    code, stdout, _ = run(["describe", name], capsys)
    assert code == 0
    assert stdout.startswith(f"{info['name']}")
    assert f"class {info['class']}" in stdout
    lines = stdout.splitlines()
    for option in info["options"]:
        line = next(li for li in lines if li.split() and li.split()[0] == option["name"])
        assert ("required" in line) if option["required"] else (f"default {option['default']!r}" in line)
        for choice in option["choices"] or []:
            assert repr(choice) in line


def test_describe_shows_accepted_values_of_literal_options(capsys):
    code, stdout, _ = run(["describe", "rotary"], capsys)
    assert code == 0
    layout = next(line for line in stdout.splitlines() if line.split() and line.split()[0] == "layout")
    assert "default 'half'" in layout and "one of 'half', 'interleaved'" in layout
    assert "aliases: rotary" in stdout.splitlines()[0]


@pytest.mark.parametrize(
    ("name", "option", "accepted"), [("shaw", "values", "'shared'"), ("mrope", "interleaved", "'hw'")]
)
def test_describe_shows_both_arms_of_a_bool_or_literal_option(name, option, accepted, capsys):
    """ShawRelative's values and MRoPE's interleaved take a bool or a string: describe said "one of 'shared'"."""
    code, stdout, _ = run(["describe", name], capsys)
    line = next(line for line in stdout.splitlines() if line.split() and line.split()[0] == option)
    assert code == 0 and f"accepts one of {accepted}, False, True" in line


def test_describe_names_what_build_fills_in_and_the_rope_types(capsys):
    from posenc.functional.rope_scaling import ROPE_TYPES

    code, stdout, _ = run(["describe", "t5"], capsys)
    assert code == 0 and "model size" not in stdout
    causal = next(line for line in stdout.splitlines() if line.split() and line.split()[0] == "causal")
    assert "whether the attention is causal" in causal and "filled in by build()" in causal
    code, stdout, _ = run(["describe", "rope"], capsys)
    scaling = next(line for line in stdout.splitlines() if line.split() and line.split()[0] == "scaling")
    assert all(repr(t) in scaling for t in ROPE_TYPES), scaling


def test_describe_json_is_the_registry_description(capsys):
    code, stdout, _ = run(["describe", "alibi", "--json"], capsys)
    assert code == 0
    assert json.loads(stdout) == json.loads(json.dumps(posenc.describe("alibi"), default=repr))


def test_describe_unknown_name_is_one_line_with_the_closest_match(capsys):
    code, _, stderr = run(["describe", "alibj"], capsys)
    assert code == 2 and stderr.count("\n") == 1
    assert "unknown position encoding 'alibj'. Did you mean 'alibi'?" in stderr


def test_extrapolate_resume_reuses_finished_models_and_refuses_other_settings(corpus_file, tmp_path, capsys):
    argv = ["extrapolate", "--corpus", str(corpus_file), "--out", str(tmp_path / "o"), *TINY_ARGS]
    code, stdout, _ = run([*argv, "--encodings", "rope"], capsys)
    assert code == 0 and "[1/1] rope: trained" in stdout
    # adding an encoding: the finished one is reused, not retrained; "k/n" says where the run is
    code, stdout, _ = run([*argv, "--encodings", "rope,alibi", "--resume"], capsys)
    assert code == 0 and "[1/2] rope: reused" in stdout and "[2/2] alibi: trained" in stdout
    labels = [e["label"] for e in json.loads((tmp_path / "o" / "results.json").read_text())["encodings"]]
    assert labels == ["rope", "alibi"]
    code, _, stderr = run([*argv, "--encodings", "rope", "--resume", "--steps", "4"], capsys)
    assert code == 2 and len(stderr.splitlines()) == 1
    assert "--resume: " in stderr and "other settings (steps 3 there, 4 now)" in stderr
    code, _, stderr = run([*argv, "--encodings", "rope"], capsys)  # neither --resume nor --force
    assert code == 2 and "add --resume to reuse its models or --force to overwrite" in stderr


# --- no lost results: --out is checked, held and merged, never silently replaced ----------------------

#: A tiny extend run (three methods, no fine-tuning): a few seconds on a loaded 2-core CPU.
EXTEND_TINY = [*TINY_ARGS, "--eval-lens", "16,32", "--methods", "none,linear", "--finetune-steps", "0",
               "--eval-chars", "512"]  # fmt: skip


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes: what a refused run must leave as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_resume_with_other_encodings_keeps_the_finished_rows(corpus_file, tmp_path, capsys):
    """``--resume --encodings`` naming other encodings adds them; the finished rows are kept (merged)."""
    argv = ["extrapolate", "--corpus", str(corpus_file), "--out", str(tmp_path / "o"), *TINY_ARGS]
    assert run([*argv, "--encodings", "rope,alibi"], capsys)[0] == 0
    first = json.loads((tmp_path / "o" / "results.json").read_text())["encodings"]
    code, stdout, stderr = run([*argv, "--encodings", "t5", "--resume"], capsys)
    assert code == 0, stderr
    assert "not asked for this time): rope, alibi" in stdout
    data = json.loads((tmp_path / "o" / "results.json").read_text())
    assert [e["label"] for e in data["encodings"]] == ["t5", "rope", "alibi"]
    assert data["encodings"][1:] == first  # kept as they were, not retrained
    with (tmp_path / "o" / "results.csv").open() as fh:
        assert {row["encoding"] for row in csv.DictReader(fh)} == {"t5", "rope", "alibi"}
    table = stdout[stdout.index("validation perplexity") :]
    assert all(f"\n{label} " in table for label in ("t5", "rope", "alibi"))


def test_resume_through_the_library_keeps_what_is_not_asked_for(corpus_file, tmp_path):
    from posenc.app.study import run_study

    settings = dict(
        train_len=16, eval_lens=(16, 32), steps=2, batch_size=4, d_model=16, num_layers=1, num_heads=2
    )
    run_study(corpus_file, ["rope", "alibi"], out_dir=tmp_path / "o", progress=False, **settings)
    result = run_study(
        corpus_file, ["alibi"], out_dir=tmp_path / "o", resume=True, progress=False, **settings
    )
    assert [e.label for e in result.encodings] == ["alibi", "rope"]
    saved = json.loads((tmp_path / "o" / "results.json").read_text())
    assert {e["label"] for e in saved["encodings"]} == {"alibi", "rope"} and saved["pending"] == []


_HOLD_SCRIPT = """
import fcntl, os, sys, time
fh = open(sys.argv[1], "a+")
fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
fh.seek(0); fh.truncate()
fh.write('{"pid": %d, "host": "here", "command": "posenc extrapolate", "since": "now"}' % os.getpid())
fh.flush()
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_run_into_a_held_folder_is_refused_and_a_killed_holder_blocks_nothing(
    corpus_file, tmp_path, capsys
):
    """Another process holds --out (as a running study does): refused, exit 2, naming the folder and
    the holder; nothing written. Killed, it blocks nothing: the OS releases its lock."""
    out = tmp_path / "o"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_SCRIPT, str(out / ".posenc.lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        argv = [
            "extrapolate",
            "--corpus",
            str(corpus_file),
            "--out",
            str(out),
            "--encodings",
            "rope",
            *TINY_ARGS,
        ]
        for extra in ([], ["--resume"], ["--force"]):
            code, stdout, stderr = run([*argv, *extra], capsys)
            assert code == 2 and stderr.count("\n") == 1, stderr
            assert f"--out {str(out)!r} is in use by another run (process {holder.pid} on here" in stderr
            assert "validation perplexity" not in stdout
        code, _, stderr = run(
            ["extend", "--corpus", str(corpus_file), "--out", str(out), *EXTEND_TINY], capsys
        )
        assert code == 2 and "is in use by another run" in stderr
        assert {p.name for p in out.iterdir()} == {".posenc.lock"}  # nothing written by the refused runs
    finally:
        holder.kill()
        holder.wait(timeout=60)
    code, _, stderr = run([*argv], capsys)
    assert code == 0, stderr
    assert (out / "results.json").is_file() and not (out / ".posenc.lock").exists()


def test_two_real_runs_into_one_folder_one_is_refused_and_ctrl_c_says_how_to_resume(corpus_file, tmp_path):
    """Two ``posenc extrapolate`` processes, one --out: the second exits 2 naming the folder and the
    first; the first, interrupted, says how to resume; then the folder is free again."""
    out = tmp_path / "o"
    argv = [sys.executable, "-m", "posenc", "extrapolate", "--corpus", str(corpus_file), "--out", str(out),
            *TINY_ARGS]  # fmt: skip
    # Ctrl-C as in a terminal: a child inherits an ignored SIGINT (a test run started in the background of a
    # non-interactive shell ignores it), and Python then installs no KeyboardInterrupt handler at all
    first = subprocess.Popen(
        [*argv, "--encodings", "rope", "--steps", "100000"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
        text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (out / ".posenc.lock").exists():
            assert first.poll() is None and time.monotonic() < deadline, "the first run never held its folder"
            time.sleep(0.2)
        second = subprocess.run([*argv, "--encodings", "alibi"], capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stderr
        assert second.stderr.strip().startswith(
            f"posenc extrapolate: error: --out {str(out)!r} is in use by another run (process {first.pid} "
        )
        assert first.poll() is None  # the first goes on
    finally:
        first.send_signal(signal.SIGINT)
        _, stderr = first.communicate(timeout=120)
    assert first.returncode == 130
    assert stderr.strip().splitlines()[-1] == (
        f"posenc extrapolate: interrupted; nothing was saved in {str(out)!r} yet"
    )
    assert not (out / ".posenc.lock").exists() and not (out / "results.json").exists()


def test_a_folder_of_one_command_is_never_overwritten_by_the_other(corpus_file, tmp_path, capsys):
    """One rule for both commands: what --out holds is checked before anything is written; a folder
    of the other command's study is refused even with --resume; only --force replaces it."""
    study, ext = tmp_path / "study", tmp_path / "ext"
    corpus = ["--corpus", str(corpus_file)]
    assert (
        run(["extrapolate", *corpus, "--out", str(study), "--encodings", "rope", *TINY_ARGS], capsys)[0] == 0
    )
    assert run(["extend", *corpus, "--out", str(ext), *EXTEND_TINY], capsys)[0] == 0
    before = {folder: _snapshot(folder) for folder in (study, ext)}
    refusals = [
        (["extend", *corpus, "--out", str(study), *EXTEND_TINY], "holds a posenc extrapolate study"),
        (["extend", *corpus, "--out", str(study), *EXTEND_TINY, "--resume"], "holds a posenc extrapolate study"),
        (["extrapolate", *corpus, "--out", str(ext), *TINY_ARGS, "--resume"], "holds a posenc extend study"),
        (["extrapolate", *corpus, "--out", str(ext), *TINY_ARGS], "holds a posenc extend study"),
        # the same command with other settings: refused with --resume, before anything is written
        (["extend", *corpus, "--out", str(ext), *EXTEND_TINY, "--steps", "4", "--resume"],
         "other settings (steps 3 there, 4 now)"),
        (["extend", *corpus, "--out", str(ext), *EXTEND_TINY, "--finetune-steps", "1", "--resume"],
         "other settings (finetune_steps 0 there, 1 now)"),
        (["extend", *corpus, "--out", str(ext), *EXTEND_TINY], "already holds results.json"),
    ]  # fmt: skip
    for argv, fragment in refusals:
        code, stdout, stderr = run(argv, capsys)
        assert code == 2 and stderr.count("\n") == 1, (argv, stderr)
        assert fragment in stderr, (argv, stderr)
        assert "validation perplexity" not in stdout
        assert {folder: _snapshot(folder) for folder in (study, ext)} == before, argv
    # the same settings resume, and --force replaces what the user asked to replace
    assert run(["extend", *corpus, "--out", str(ext), *EXTEND_TINY, "--resume"], capsys)[0] == 0
    # the figure of the study replaced, as a study marks it (drawn here without matplotlib too)
    (study / "extrapolation.png").write_bytes(
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\x1ctEXtSoftware\x00posenc study figure"
    )
    assert run(["extend", *corpus, "--out", str(study), *EXTEND_TINY, "--force"], capsys)[0] == 0
    assert json.loads((study / "results.json").read_text())["results"]
    assert not (
        study / "extrapolation.png"
    ).exists()  # a figure of the results replaced: not left beside them


@pytest.mark.parametrize("command", ["extrapolate", "extend"])
def test_resume_into_a_folder_without_a_study_replaces_nothing(command, corpus_file, tmp_path, capsys):
    """Files of a study's names that no posenc study made (a hand-made results.csv, report.md) and no
    results.json: nothing to resume, so --resume is refused like a plain run (it replaced them)."""
    out = tmp_path / "mine"
    out.mkdir()
    for name in ("results.csv", "report.md"):
        (out / name).write_text("my own\n")
    tiny = TINY_ARGS if command == "extrapolate" else EXTEND_TINY
    argv = [command, "--corpus", str(corpus_file), "--out", str(out), *tiny]
    for extra in ([], ["--resume"]):
        code, _, stderr = run([*argv, *extra], capsys)
        assert code == 2 and "no results.json to resume from: add --force to overwrite" in stderr
    assert all((out / name).read_text() == "my own\n" for name in ("results.csv", "report.md"))


def test_an_extend_folder_with_only_its_base_model_is_not_retrained_over(corpus_file, tmp_path, capsys):
    """An extend run stopped after its base model: the next run into the folder needs --resume or
    --force; with --resume a base model of other settings is refused, not trained again over."""
    out = tmp_path / "ext"
    argv = ["extend", "--corpus", str(corpus_file), "--out", str(out), *EXTEND_TINY]
    assert run(argv, capsys)[0] == 0
    for name in ("results.json", "results.csv", "report.md", "extend.png"):
        (out / name).unlink(missing_ok=True)
    before = _snapshot(out)
    code, _, stderr = run(argv, capsys)
    assert code == 2 and "already holds base.pt; add --resume" in stderr
    code, _, stderr = run([*argv, "--resume", "--seed", "5"], capsys)
    assert (
        code == 2 and "base.pt' was trained with other settings or versions (seed 0 there, 5 now)" in stderr
    )
    assert _snapshot(out) == before
    code, stdout, stderr = run([*argv, "--resume"], capsys)
    assert code == 0 and "rope: reusing" in stdout, stderr


def test_force_removes_the_checkpoints_of_the_study_it_replaces(corpus_file, tmp_path, capsys):
    """--force left the earlier run's model-*.pt and baseline-*.pt beside the new results (a later --resume
    reused them as this run's); they go first, but never a file no study made, nor the --model to load."""
    out = tmp_path / "o"
    corpus = ["--corpus", str(corpus_file), "--out", str(out)]
    assert run(["extrapolate", *corpus, *TINY_ARGS, "--encodings", "rope,alibi"], capsys)[0] == 0
    (out / "model-mine.pt").write_text("not a checkpoint")
    assert run(["extrapolate", *corpus, *TINY_ARGS, "--encodings", "rope", "--force"], capsys)[0] == 0
    assert sorted(p.name for p in out.glob("*.pt")) == ["model-mine.pt", "model-rope.pt"]
    # the other command over it; then a forced run that loads the base model from the folder it clears
    assert run(["extend", *corpus, *EXTEND_TINY, "--baselines", "alibi", "--force"], capsys)[0] == 0
    assert sorted(p.name for p in out.glob("*.pt")) == ["base.pt", "baseline-alibi.pt", "model-mine.pt"]
    code, _, stderr = run(
        ["extend", *corpus, *EXTEND_TINY, "--model", str(out / "base.pt"), "--force"], capsys
    )
    assert code == 0, stderr
    assert sorted(p.name for p in out.glob("*.pt")) == ["base.pt", "model-mine.pt"]


def test_a_full_disk_is_said_in_one_line_with_what_was_kept(corpus_file, tmp_path, capsys, monkeypatch):
    """No space left while a study saves its results: a traceback; now one line, and what --resume keeps."""
    import errno
    from pathlib import Path

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    out = tmp_path / "o"
    monkeypatch.setattr(Path, "write_text", full)
    code, _, stderr = run(
        ["extrapolate", "--corpus", str(corpus_file), "--out", str(out), *TINY_ARGS, "--encodings", "rope"],
        capsys,
    )
    assert code == 1 and stderr.count("\n") == 1, stderr
    assert "posenc extrapolate: error: no space left on the device writing " in stderr
    # (its first results were not written: nothing to resume, which --resume would refuse)
    assert "holds no results to resume from: run it again with --force" in stderr


def test_force_removes_only_the_figures_and_report_a_study_made(corpus_file, tmp_path, capsys):
    """--force removed report.md and the figures by name, whoever made them; now only those carrying a study's
    mark (the PNG's Software text, the report's heading)."""
    from posenc.app.study.outdir import made_by_posenc

    out = tmp_path / "o"
    corpus = ["--corpus", str(corpus_file), "--out", str(out)]
    assert run(["extend", *corpus, *EXTEND_TINY], capsys)[0] == 0
    made = [out / "report.md", out / "extend.png"]
    assert all(p.is_file() and made_by_posenc(p) for p in made)
    assert run(["extrapolate", *corpus, *TINY_ARGS, "--encodings", "rope", "--force"], capsys)[0] == 0
    assert not any(p.exists() for p in made)  # the replaced study's: they would pass for this run's
    (out / "report.md").write_text("# my notes\n")
    (out / "extend.png").write_bytes(b"\x89PNG\r\n\x1a\n a figure of mine")
    assert not any(made_by_posenc(p) for p in made)
    assert run(["extrapolate", *corpus, *TINY_ARGS, "--encodings", "rope", "--force"], capsys)[0] == 0
    assert (out / "report.md").read_text() == "# my notes\n" and (out / "extend.png").read_bytes().endswith(
        b"mine"
    )


@pytest.mark.parametrize("command", ["extrapolate", "extend"])
def test_resume_refuses_results_of_another_posenc_or_torch(command, corpus_file, tmp_path, capsys):
    """--resume merged rows made by another posenc or torch with this run's, unsaid; the results record both
    versions, and results of others (or of an older posenc, which recorded neither) are refused."""
    out = tmp_path / "o"
    tiny = TINY_ARGS if command == "extrapolate" else EXTEND_TINY
    argv = [command, "--corpus", str(corpus_file), "--out", str(out), *tiny]
    assert run(argv, capsys)[0] == 0
    data = json.loads((out / "results.json").read_text())
    assert data["environment"]["posenc"] == posenc.__version__
    data["environment"]["posenc"] = "0.1.0"
    del data["environment"]["torch"]
    (out / "results.json").write_text(json.dumps(data))
    before = _snapshot(out)
    code, _, stderr = run([*argv, "--resume"], capsys)
    assert code == 2 and stderr.count("\n") == 1
    assert (
        f"was made by another version (posenc 0.1.0 there, {posenc.__version__} now; torch not recorded there, "
        f"{torch.__version__} now); resume with the versions that made it, use another folder, or start over "
        f"(posenc {command} --force)"
    ) in stderr
    assert _snapshot(out) == before


def test_resume_refuses_checkpoints_of_another_posenc_or_torch(corpus_file, tmp_path, capsys):
    """An interrupted extend leaves checkpoints and no results.json, and --resume reused them whatever versions
    made them; checkpoints record posenc's and torch's (as results do), and a resume compares them."""
    out = tmp_path / "o"
    argv = ["extend", "--corpus", str(corpus_file), "--out", str(out), *EXTEND_TINY]
    assert run(argv, capsys)[0] == 0
    for path in out.iterdir():  # (interrupted before its results: only its checkpoints)
        if path.suffix != ".pt":
            path.unlink()
    payload = torch.load(out / "base.pt", weights_only=True)
    assert payload["meta"]["posenc"] == posenc.__version__ and payload["meta"]["torch"] == torch.__version__
    payload["meta"]["posenc"] = "0.1.0"
    torch.save(payload, out / "base.pt")
    code, _, stderr = run([*argv, "--resume"], capsys)
    assert code == 2 and stderr.count("\n") == 1, stderr
    assert f"other settings or versions (posenc '0.1.0' there, '{posenc.__version__}' now)" in stderr


def test_extend_resume_keeps_the_base_model_s_training_record(corpus_file, tmp_path, capsys):
    """The base model reused by --resume lost its final training loss and time from results.json."""
    argv = ["extend", "--corpus", str(corpus_file), "--out", str(tmp_path / "o"), *EXTEND_TINY]
    assert run(argv, capsys)[0] == 0
    first = json.loads((tmp_path / "o" / "results.json").read_text())["base"]
    assert run([*argv, "--resume", "--methods", "none,linear,yarn"], capsys)[0] == 0
    base = json.loads((tmp_path / "o" / "results.json").read_text())["base"]
    assert first["how"] == "trained" and base["how"].startswith("resumed from ")
    assert {key: base[key] for key in first if key != "how"} == {
        key: value for key, value in first.items() if key != "how"
    }


def test_corpus_dot_with_the_default_out_reads_the_same_text_every_run(tmp_path, capsys):
    """``--corpus .`` and the default --out inside it: the second run reads the same text (its
    --resume finds the same corpus), never the first run's results."""
    lines = [f"def f{i}(x):\n    return x * {i % 7} + {i % 3}\n" for i in range(400)]
    (tmp_path / "notes.txt").write_text("".join(lines)[:6000], encoding="utf-8")
    code, first, stderr = run(["extrapolate", "--corpus", ".", "--encodings", "rope", *TINY_ARGS], capsys)
    assert code == 0, stderr
    assert (tmp_path / "posenc-extrapolation" / "results.json").is_file()
    code, second, stderr = run(
        ["extrapolate", "--corpus", ".", "--encodings", "rope,alibi", "--resume", *TINY_ARGS], capsys
    )
    assert code == 0, stderr
    assert "[1/2] rope: reused" in second
    assert first.splitlines()[0] == second.splitlines()[0]  # corpus: .: 6,000 characters (1 UTF-8 files)
    # the same for extend, whose default folder is another, and for a folder named --out
    code, _, stderr = run(["extend", "--corpus", ".", *EXTEND_TINY], capsys)
    assert code == 0, stderr
    code, stdout, stderr = run(["extend", "--corpus", ".", *EXTEND_TINY, "--resume"], capsys)
    assert code == 0 and "rope: reusing" in stdout, stderr
    # posenc output named as the corpus is refused
    code, _, stderr = run(["extrapolate", "--corpus", "posenc-extend", "--out", "o", *TINY_ARGS], capsys)
    assert code == 2 and "is in a posenc output folder" in stderr
    code, _, stderr = run(
        ["extrapolate", "--corpus", "posenc-extrapolation/results.csv", "--out", "o", *TINY_ARGS], capsys
    )
    assert code == 2 and "is in a posenc output folder" in stderr


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_every_written_file_follows_the_umask(corpus_file, tmp_path, capsys, umask):
    """Results, report and checkpoints get the mode of the figure beside them (0o666 less the umask)."""
    old = os.umask(umask)
    try:
        for command, extra in (("extrapolate", ["--encodings", "rope", *TINY_ARGS]), ("extend", EXTEND_TINY)):
            out = tmp_path / command
            assert run([command, "--corpus", str(corpus_file), "--out", str(out), *extra], capsys)[0] == 0
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
            assert len(modes) >= 4 and set(modes.values()) == {0o666 & ~umask}, modes
    finally:
        os.umask(old)


# --- option errors come first, whatever --out holds ---------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["extrapolate", "--encodings", "ropee"], "--encodings: unknown position encoding 'ropee'"),
        (["extrapolate", "--steps", "-5"], "argument --steps: expected a positive integer, got '-5'"),
        (["extrapolate", "--eval-lens", "8"], "--eval-lens: length 8 is below --train-len=16"),
        (["extrapolate", "--corpus", "/no/such/corpus.txt"], "--corpus path '/no/such/corpus.txt' does not exist"),
        (["extrapolate", "--d-model", "15"], "--d-model=15 must be divisible by --num-heads=2"),
        (["extend", "--baselines", "ropee"], "--baselines: unknown position encoding 'ropee'"),
        (["extend", "--baselines", "alibi,,none"], "--baselines 'alibi,,none' has a comma with nothing"),
        (["extend", "--baselines", "learned"], "--baselines: 'learned' has a fixed-size position table"),
        (["extend", "--methods", "linear,bogus"], "--methods: unknown method 'bogus'"),
        (["extend", "--model", "/no/such/model.pt"], "--model '/no/such/model.pt' is not a file"),
    ],
)  # fmt: skip
def test_bad_options_say_what_is_wrong_even_when_the_default_out_holds_results(
    argv, fragment, corpus_file, tmp_path, capsys
):
    """A default --out in the working folder that holds an earlier run's results changes no option
    error: the option is reported, not the folder; and nothing in the folder changes."""
    for folder in ("posenc-extrapolation", "posenc-extend"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "results.json").write_text('{"config": {}, "corpus": {}, "encodings": []}')
    before = _snapshot(tmp_path)
    corpus = [] if "--corpus" in argv else ["--corpus", str(corpus_file)]
    code, _, stderr = run([argv[0], *corpus, *TINY_ARGS, *argv[1:]], capsys)
    assert code == 2 and stderr.count("\n") == 1, stderr
    assert fragment in stderr, stderr
    assert "--encodings" not in stderr or argv[0] == "extrapolate"
    assert "already holds" not in stderr and "--out" not in stderr
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["extrapolate", "--encodings", "ropee"],
        ["extrapolate", "--corpus", "EMPTY"],
        ["extrapolate", "--train-len", "6000", "--eval-lens", "6000"],  # longer than the corpus
        ["extend", "--baselines", "ropee"],
        ["extend", "--eval-lens", "16,6000"],  # fine-tuning longer than the corpus
    ],
    ids=lambda argv: " ".join(argv),
)
def test_a_refused_run_leaves_no_out_folder_behind(argv, corpus_file, tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    argv = [str(tmp_path / "empty.txt") if a == "EMPTY" else a for a in argv]
    corpus = [] if "--corpus" in argv else ["--corpus", str(corpus_file)]
    tiny = EXTEND_TINY if argv[0] == "extend" else TINY_ARGS
    out = tmp_path / "new" / "deeper" / "out"
    code, _, stderr = run([argv[0], *corpus, "--out", str(out), *tiny, *argv[1:]], capsys)
    assert code == 2 and stderr.count("\n") == 1, stderr
    assert not (tmp_path / "new").exists()


# --- the newcomer's path ----------------------------------------------------------------------------


def test_ctrl_c_says_what_was_saved_and_how_to_resume(corpus_file, tmp_path, monkeypatch, capsys):
    import posenc.app.study

    argv = ["extrapolate", "--corpus", str(corpus_file), "--out", str(tmp_path / "o"), "--encodings", "rope"]
    assert run([*argv, *TINY_ARGS], capsys)[0] == 0

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(posenc.app.study, "run_study", interrupted)
    code, _, stderr = run([*argv, "--encodings", "rope,alibi", "--resume", *TINY_ARGS], capsys)
    assert code == 130
    assert stderr.strip() == (
        f"posenc extrapolate: interrupted; what finished is saved in {str(tmp_path / 'o')!r}: run the same "
        "command with --resume to continue without redoing it"
    )
    monkeypatch.setattr(posenc.app.study, "run_extend", interrupted)
    code, _, stderr = run(
        ["extend", "--corpus", str(corpus_file), "--out", str(tmp_path / "e"), *EXTEND_TINY], capsys
    )
    assert (
        code == 130
        and stderr.strip() == f"posenc extend: interrupted; nothing was saved in {str(tmp_path / 'e')!r} yet"
    )
    assert not (tmp_path / "e").exists()


def test_describe_says_what_a_none_default_stands_for(capsys):
    code, stdout, _ = run(["describe", "rope"], capsys)
    assert code == 0
    assert "  base           default None, meaning 10000.0; accepts float | None" in stdout
    # rotary_dim follows the head width: not one value
    assert "  rotary_dim     default None; accepts int | None" in stdout
    assert "  rotary_offset  default 0; accepts int" in stdout


def test_list_is_sorted_by_name(capsys):
    code, stdout, _ = run(["list"], capsys)
    assert code == 0
    names = [line.split()[0] for line in stdout.splitlines()[1:] if line and not line.startswith(" ")]
    names = [n for n in names if n != "posenc"]
    assert names == sorted(names) == sorted(canonical_names())


def test_force_keeps_the_study_until_every_option_is_checked(corpus_file, tmp_path, capsys, monkeypatch):
    """--force removed the earlier study first, then checked the --model checkpoint, the scalings and the
    process count: a refused run left the folder empty (base model, results, report and figure lost)."""
    out, other = tmp_path / "o", tmp_path / "x"
    corpus = ["--corpus", str(corpus_file)]
    assert run(["extend", *corpus, "--out", str(out), *EXTEND_TINY], capsys)[0] == 0
    assert (
        run(["extrapolate", *corpus, "--out", str(other), *TINY_ARGS, "--encodings", "alibi"], capsys)[0] == 0
    )
    before = _snapshot(out)
    for extra in (["--model", str(other / "model-alibi.pt")], ["--factor", "1e-9"]):
        code, _, stderr = run(["extend", *corpus, "--out", str(out), *EXTEND_TINY, *extra, "--force"], capsys)
        assert code == 2 and ("not a plain RoPE model" in stderr or "--methods: linear" in stderr), stderr
        assert _snapshot(out) == before
    # rank 0 of a torchrun of 2 processes given --nproc 4: refused before the process group starts
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    for argv in (["extend", *EXTEND_TINY], ["extrapolate", *TINY_ARGS, "--encodings", "rope"]):
        code, _, stderr = run([*argv, *corpus, "--out", str(out), "--nproc", "4", "--force"], capsys)
        assert code == 2 and "--nproc=4 but 2 processes" in stderr, stderr
        assert _snapshot(out) == before


def test_extend_from_a_loaded_model_records_its_training_and_resumes_only_with_it(
    corpus_file, tmp_path, capsys
):
    """A study of a loaded model gave this run's --steps, --lr and --seed as the model's training (results,
    report and figure title); resumed without --model it trained a new base model, wrote base.pt beside
    rows of the loaded one, and only then refused."""
    import json

    models, out = tmp_path / "m", tmp_path / "o"
    corpus = ["--corpus", str(corpus_file)]
    argv = [*TINY_ARGS, "--steps", "4", "--seed", "7", "--lr", "0.002"]
    assert run(["extrapolate", *corpus, "--out", str(models), *argv, "--encodings", "rope"], capsys)[0] == 0
    model = ["--model", str(models / "model-rope.pt")]
    assert run(["extend", *corpus, "--out", str(out), *EXTEND_TINY, *model, "--steps", "9"], capsys)[0] == 0
    config = json.loads((out / "results.json").read_text())["config"]
    assert (config["steps"], config["seed"], config["lr"]) == (4, 7, 0.002)
    assert "steps=4" in (out / "report.md").read_text()
    before = _snapshot(out)
    same = ["--steps", "4", "--seed", "7", "--lr", "0.002"]  # its settings, without the model
    code, _, stderr = run(["extend", *corpus, "--out", str(out), *EXTEND_TINY, *same, "--resume"], capsys)
    assert code == 2 and "measured on the model loaded from" in stderr and "--model" in stderr, stderr
    base = ["--model", str(out.parent / "m" / "model-rope.pt")]
    assert _snapshot(out) == before  # no base model trained, none written
    # the same model with one weight changed: its settings, another base model
    from posenc.app.study.checkpoint import load_checkpoint, save_checkpoint

    other, chars, meta = load_checkpoint(models / "model-rope.pt")
    with torch.no_grad():
        next(other.parameters()).add_(0.01)
    changed = save_checkpoint(tmp_path / "changed.pt", other, vocab=chars, position="rope", meta=meta)
    code, _, stderr = run(
        ["extend", *corpus, "--out", str(out), *EXTEND_TINY, "--model", str(changed), "--resume"], capsys
    )
    assert code == 2 and "measured on another base model than" in stderr, stderr
    assert _snapshot(out) == before
    code, _, stderr = run(["extend", *corpus, "--out", str(out), *EXTEND_TINY, *base, "--resume"], capsys)
    assert code == 0, stderr


def test_an_extend_base_model_of_other_threads_is_not_resumed(corpus_file, tmp_path, capsys):
    """base.pt did not record the thread count it was trained with: resumed with another, its rows were
    given as the new count's (which rounds differently)."""
    out = tmp_path / "ext"
    argv = ["extend", "--corpus", str(corpus_file), "--out", str(out), *EXTEND_TINY]
    assert run([*argv, "--threads", "2"], capsys)[0] == 0
    for name in ("results.json", "results.csv", "report.md", "extend.png"):
        (out / name).unlink(missing_ok=True)
    code, _, stderr = run([*argv, "--threads", "1", "--resume"], capsys)
    assert code == 2 and "threads 2 there, 1 now" in stderr, stderr


def test_a_run_without_matplotlib_removes_the_figure_it_cannot_redraw(
    corpus_file, tmp_path, capsys, monkeypatch
):
    """Without matplotlib a resumed study kept the earlier figure beside results it did not show."""
    import posenc.app.cli._study as study_cli

    out = tmp_path / "o"
    corpus = ["--corpus", str(corpus_file), "--out", str(out)]
    assert run(["extrapolate", *corpus, *TINY_ARGS, "--encodings", "rope"], capsys)[0] == 0
    assert (out / "extrapolation.png").is_file()
    monkeypatch.setattr(study_cli, "_figure_note", lambda command: "note: no matplotlib")
    assert run(["extrapolate", *corpus, *TINY_ARGS, "--encodings", "rope,alibi", "--resume"], capsys)[0] == 0
    assert not (out / "extrapolation.png").exists()
