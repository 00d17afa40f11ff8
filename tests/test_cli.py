"""The ``posenc`` command: the study end to end, one-line errors with exit code 2, list and describe."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

import posenc
from posenc.cli import _FLAGS, _in_flags, main
from posenc.study import ConfigError, StudyConfig, default_encodings

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
    from posenc.study import ExtendConfig

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
    import posenc.cli as cli

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
        "from posenc.cli import main\n"
        "try:\n"
        "    main(['extrapolate', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = {'posenc.study.training', 'posenc.study.plan', 'posenc.plots', 'matplotlib'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


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
