"""The study data-parallel (posenc.app.study.parallel): nproc processes give one process's numbers.

Spawned studies talk over gloo on 127.0.0.1 and are bounded by ``SPAWN_TIMEOUT_S`` (past it
the ranks are killed and the test fails, never hangs). One small nproc=2 study runs by
default; the others are ``slow``. The DDP step of ``TransformerLM`` itself is tested in
tests/test_distributed.py (``test_ddp_step_equals_single_process_step``).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc.app.study import ConfigError, Corpus, ExtendConfig, StudyConfig, run_extend, run_study
from posenc.app.study import parallel as parallel_module
from posenc.app.study.parallel import Ranks, joined


@pytest.fixture(autouse=True)
def _in_a_fresh_folder(tmp_path, monkeypatch):
    """Every test runs in its own empty folder: none reads or writes the working directory."""
    monkeypatch.chdir(tmp_path)


# DDP averages the ranks' float32 gradients, (g0 + g1) / 2, where one process takes the mean
# over all tokens at once: the weights differ by float32 rounding (~1e-7 relative) after each
# step, and a few AdamW steps on a tiny model do not grow that past 1e-6; the evaluation adds
# float64 sums in another order. Measured: 2e-8. 1e-5 leaves room and still fails on any
# real difference (another batch or another weight draws a different loss at 1e-3).
STUDY_RTOL = 1e-5
SPAWN_TIMEOUT_S = 180.0

TINY: dict[str, Any] = {
    "train_len": 16,
    "eval_lens": (16, 32),
    "steps": 6,
    "batch_size": 4,
    "d_model": 16,
    "num_layers": 1,
    "num_heads": 2,
    "eval_chars": 512,
}


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus.from_text(Corpus.standard_library().text[:120_000])


@pytest.fixture(autouse=True)
def bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel_module, "SPAWN_TIMEOUT_S", SPAWN_TIMEOUT_S)
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):  # a test run under torchrun is not a study's world
        monkeypatch.delenv(key, raising=False)


def _numbers(result: Any) -> list[tuple[str, int, float | None, float | None, str | None]]:
    return [
        (e.label, n.eval_len, n.perplexity, n.perplexity_beyond, n.error)
        for e in result.encodings
        for n in e.lengths
    ]


def _assert_same_numbers(one: Any, many: Any) -> None:
    assert [r[:2] + r[4:] for r in _numbers(one)] == [r[:2] + r[4:] for r in _numbers(many)]
    for a, b in zip(_numbers(one), _numbers(many), strict=True):
        for x, y in zip(a[2:4], b[2:4], strict=True):
            assert (x is None) == (y is None), (a, b)
            if x is not None:
                assert math.isclose(x, y, rel_tol=STUDY_RTOL), (a, b)
    for e1, e2 in zip(one.encodings, many.encodings, strict=True):
        assert math.isclose(e1.final_train_loss, e2.final_train_loss, rel_tol=STUDY_RTOL)


# --- one process: the pieces and the checks before any process starts --------------------


def test_batch_slices_partition_the_batch() -> None:
    for world in (1, 2, 4):
        slices = [Ranks(world, r, torch.device("cpu")).batch_slice(8) for r in range(world)]
        assert [i for s in slices for i in range(8)[s]] == list(range(8))
        assert {s.stop - s.start for s in slices} == {8 // world}
    # evaluation batches of any size: every row once, sizes within one
    for n in (0, 1, 5, 7, 16):
        parts = [range(n)[Ranks(3, r, torch.device("cpu")).rows(n)] for r in range(3)]
        assert [i for p in parts for i in p] == list(range(n))
        assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_batch_slice_refuses_an_indivisible_batch() -> None:
    with pytest.raises(ConfigError, match=r"batch_size=6 must be divisible by the number of processes \(4\)"):
        Ranks(4, 0, torch.device("cpu")).batch_slice(6)


@pytest.mark.parametrize(
    ("settings", "error", "match"),
    [
        ({"nproc": 0}, ConfigError, r"nproc must be a positive int, got 0"),
        ({"nproc": True}, TypeError, r"nproc must be a positive int"),
        ({"nproc": "2"}, TypeError, r"nproc must be a positive int"),
        ({"nproc": 10_000}, ConfigError, r"nproc must be at most 256"),
        ({"nproc": 3, "batch_size": 4}, ConfigError, r"nproc=3 must divide batch_size=4"),
        ({"nproc": 2, "device": "meta"}, ConfigError, r"device 'meta'"),
    ],
)
def test_config_refuses_bad_nproc(settings: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        StudyConfig(**{**TINY, **settings})


def test_extend_config_refuses_an_indivisible_fine_tuning_batch() -> None:
    # batch_size * train_len // longest = 4 * 16 // 64 = 1 window: not for 2 processes
    with pytest.raises(ConfigError, match=r"nproc=2 must divide the fine-tuning batch.* = 1 windows"):
        ExtendConfig(**{**TINY, "eval_lens": (16, 64), "nproc": 2})
    ExtendConfig(**{**TINY, "eval_lens": (16, 64), "nproc": 2, "finetune_steps": 0})  # no fine-tuning: fine


def test_bad_input_fails_before_any_process_starts(corpus: Corpus, monkeypatch: pytest.MonkeyPatch) -> None:
    import posenc.app.study.extrapolate as extrapolate

    def no_spawn(*args: Any, **kwargs: Any) -> None:
        pytest.fail("spawned processes for a study that cannot run")

    monkeypatch.setattr(extrapolate, "spawn", no_spawn)
    with pytest.raises(ConfigError, match="encodings"):
        run_study(corpus, ["rope", "no_such_encoding"], progress=False, **{**TINY, "nproc": 2})
    with pytest.raises(ConfigError, match="eval_lens"):  # validation text too short for the longest length
        run_study(
            Corpus.from_text("ab" * 400),
            ["rope"],
            progress=False,
            **{**TINY, "nproc": 2, "eval_lens": (16, 4096)},
        )


def test_torchrun_world_is_checked_before_joining(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with (
        pytest.raises(ConfigError, match=r"nproc=4 but 2 processes were started"),
        joined(StudyConfig(**{**TINY, "nproc": 4})),
    ):
        pass
    monkeypatch.setenv("WORLD_SIZE", "3")
    with (
        pytest.raises(ConfigError, match=r"batch_size=4 must be divisible by the number of processes \(3\)"),
        joined(StudyConfig(**TINY)),
    ):
        pass


def test_one_process_joins_nothing() -> None:
    with joined(StudyConfig(**TINY)) as ranks:
        assert ranks is None
    assert not parallel_module.wants_spawn(StudyConfig(**TINY))
    assert parallel_module.wants_spawn(StudyConfig(**{**TINY, "nproc": 2}))


# --- spawned processes --------------------------------------------------------------------


def test_two_process_study_equals_one_process(corpus: Corpus, tmp_path: Path) -> None:
    specs = ["rope", "learned"]  # learned: a length it cannot run is reported the same way
    one = run_study(corpus, specs, progress=False, **TINY)
    lines: list[str] = []
    two = run_study(corpus, specs, progress=False, out_dir=tmp_path, log=lines.append, **{**TINY, "nproc": 2})
    _assert_same_numbers(one, two)
    assert two.environment["processes"] == 2 and one.environment["processes"] == 1
    # rank 0 alone logs (its lines came back to this process) and writes
    assert sum("2 processes, DDP" in line for line in lines) == 1
    assert sum(": trained in" in line for line in lines) == len(specs)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["config"]["nproc"] == 2 and [e["label"] for e in saved["encodings"]] == specs
    assert sorted(p.name for p in tmp_path.glob("model-*.pt")) == ["model-learned.pt", "model-rope.pt"]
    # resuming with another process count reuses the results (it changes no number)
    again = run_study(corpus, specs, progress=False, out_dir=tmp_path, resume=True, **TINY)
    assert _numbers(again) == _numbers(two)


def _fail_on_rank_1(log: Any = None) -> None:
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ConfigError("steps: rank 1 refuses", argument="steps")
    dist.barrier()  # rank 0 waits for rank 1, which never comes: the parent must stop it


@pytest.mark.slow
def test_a_rank_failure_is_raised_as_itself_and_stops_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(ConfigError, match="rank 1 refuses"):
        parallel_module.spawn(_fail_on_rank_1, 2, "cpu")
    assert list(tmp_path.iterdir()) == []  # neither our folder nor torch's error files are left behind


def _sleep(log: Any = None) -> None:
    import time

    time.sleep(600)


@pytest.mark.slow
def test_a_stuck_study_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel_module, "SPAWN_TIMEOUT_S", 8.0)
    with pytest.raises(TimeoutError, match="did not finish within 8 s"):
        parallel_module.spawn(_sleep, 2, "cpu")


@pytest.mark.slow
def test_every_default_encoding_trains_data_parallel(corpus: Corpus) -> None:
    # DDP refuses a parameter that gets no gradient: every encoding the study runs must pass
    settings = {**TINY, "steps": 2}
    one = run_study(corpus, None, progress=False, **settings)
    two = run_study(corpus, None, progress=False, **{**settings, "nproc": 2})
    _assert_same_numbers(one, two)


@pytest.mark.slow
def test_two_process_extend_equals_one_process(corpus: Corpus, tmp_path: Path) -> None:
    settings = {**TINY, "methods": ("none", "linear", "yarn"), "finetune_steps": 3, "baselines": ("alibi",)}
    one = run_extend(corpus, ExtendConfig(**settings), progress=False)
    two = run_extend(corpus, ExtendConfig(**settings, nproc=2), out_dir=tmp_path, progress=False)
    assert [(r.method, r.finetune_steps, r.eval_len) for r in one.rows] == [
        (r.method, r.finetune_steps, r.eval_len) for r in two.rows
    ]
    for a, b in zip(one.rows, two.rows, strict=True):
        assert math.isclose(a.perplexity, b.perplexity, rel_tol=STUDY_RTOL), (a, b)
    # the checkpoints, and the results written as each method finishes (rank 0 only: no other file)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["base.pt", "baseline-alibi.pt", "results.csv", "results.json"]


_KILLED_PARENT_SCRIPT = """
import os, sys, time
from pathlib import Path
from posenc.app.study.parallel import spawn

def started(folder, log=None):
    import torch.distributed as dist
    Path(folder, f"rank{dist.get_rank()}").write_text(str(os.getpid()))
    time.sleep(600)

if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a job a script puts in the background (`cmd &`)
    spawn(started, 2, "cpu", sys.argv[1])
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not reaped by a container's init, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("signal", ["kill", "terminate"])
def test_ranks_end_when_the_process_that_spawned_them_is_killed(tmp_path: Path, signal: str) -> None:
    """A killed parent no longer holds the folder's lock: its ranks must not run on and write there (torch's
    spawn sends them SIGINT, which a background job of a script ignores)."""
    import time

    script = tmp_path / "parent.py"
    script.write_text(_KILLED_PARENT_SCRIPT)
    # a killed parent cannot remove its temporary folder: keep it in the test's own
    parent = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)], env={**os.environ, "TMPDIR": str(tmp_path)}
    )
    files = [tmp_path / "rank0", tmp_path / "rank1"]
    deadline = time.monotonic() + 120
    while not all(f.is_file() and f.read_text() for f in files) and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = [int(f.read_text()) for f in files]
    assert all(map(_running, pids))
    getattr(parent, signal)()
    parent.wait()
    deadline = time.monotonic() + 20
    while any(map(_running, pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(_running, pids))


_TORCHRUN_SCRIPT = """
import json, sys
from posenc.app.study import Corpus, run_study
import torch.distributed as dist

corpus = Corpus.from_text(Corpus.standard_library().text[:120_000])
result = run_study(corpus, ["rope", "alibi"], progress=False, out_dir=sys.argv[1], **json.loads(sys.argv[2]))
print(f"rank {dist.get_rank() if dist.is_initialized() else 'none'}: done")
"""


@pytest.mark.slow
def test_study_under_torchrun_equals_one_process(corpus: Corpus, tmp_path: Path) -> None:
    script = tmp_path / "study.py"
    script.write_text(_TORCHRUN_SCRIPT)
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={parallel_module._free_port()}",
        str(script),
        str(out),
        json.dumps({**TINY, "eval_lens": list(TINY["eval_lens"])}),
    ]
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # torchrun's own temporary files stay in the test's folder
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=SPAWN_TIMEOUT_S, check=False, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # the study destroyed the group it started: no rank reports one afterwards
    assert done.stdout.count("rank none: done") == 2
    saved = json.loads((out / "results.json").read_text())
    assert saved["environment"]["processes"] == 2
    one = run_study(corpus, ["rope", "alibi"], progress=False, **TINY)
    for e, s in zip(one.encodings, saved["encodings"], strict=True):
        for n, m in zip(e.lengths, s["lengths"], strict=True):
            assert math.isclose(n.perplexity, m["perplexity"], rel_tol=STUDY_RTOL)
