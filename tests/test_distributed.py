"""posenc.distributed: sequence sharding, context-parallel attention, FSDP2 and DDP on 2 CPU ranks.

Distributed tests spawn 2 processes that talk over gloo on 127.0.0.1 (a free port, a bounded
wait: a hang fails the test instead of blocking the suite). One small one runs by default; the
costly ones (gradients, every encoding, FSDP2, DDP, torch's own sharding) are ``slow``.
Every rank builds the same whole inputs from one seed, so that it can compute the
single-process reference itself and compare its own rows.
"""

from __future__ import annotations

import copy
import itertools
import socket
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import posenc
from posenc.distributed import context_parallel_attention, shard_batch, shard_positions, unshard
from posenc.registry import lookup

# float64 throughout the attention checks: the sharded and the whole computation sum in
# different orders (chunks, gathered keys), which float64 resolves to ~1e-15.
F64_TOL = {"atol": 1e-10, "rtol": 1e-10}
# A float32 model trained one step: sharded (FSDP/DDP) reductions sum per-rank gradients in
# another order than one process, a few float32 ulps on values of order 1.
MODEL_TOL = {"atol": 2e-5, "rtol": 2e-5}
#: The longest a spawned pair may take before the test fails (imports dominate: ~5 s each).
SPAWN_TIMEOUT_S = 120.0

DIMS = {"d_model": 32, "num_heads": 4, "head_dim": 8, "max_len": 64}


#: Encodings whose positions have axes: their states order tokens by index, not by position
#: (image tokens share positions), so a shard of queries cannot carry causality in its positions.
AXIS_ENCODINGS = {"mrope", "rope_axial", "rope2d", "learned2d", "sinusoidal2d"}


def registered_classes() -> list[str]:
    """One registered name per encoding class (aliases dropped), 1-D positions only."""
    names, seen = [], set()
    for name in posenc.available():
        cls = lookup(name)
        if name in AXIS_ENCODINGS:
            continue
        if cls not in seen:
            seen.add(cls)
            names.append(name)
    return names


def make(name: str, causal: bool, dtype: torch.dtype = torch.float64) -> posenc.PositionalEncoding:
    enc = posenc.build(name, causal=causal, **DIMS)
    with torch.no_grad():  # learned tables start at zero in some encodings: randomise them
        gen = torch.Generator().manual_seed(7)
        for p in enc.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    return enc.to(dtype)


# --- single process ------------------------------------------------------------------------


def torch_head_tail_indices(seq_len: int, world_size: int) -> torch.Tensor:
    """torch's own head-tail load balancer's order, ``(world_size, seq_len / world_size)``.

    The class is private: in torch 2.13 and 2.15 it is ``_HeadTailLoadBalancer`` in
    ``torch.distributed.tensor.experimental._context_parallel._load_balancer`` (re-exported by
    ``..._attention``), with ``_generate_indices()`` returning ``(1, seq_len)``.
    """
    from torch.distributed.tensor.experimental._attention import _HeadTailLoadBalancer

    balancer = _HeadTailLoadBalancer(seq_len, world_size, torch.device("cpu"))
    return balancer._generate_indices().reshape(world_size, -1)


@pytest.mark.parametrize(("seq_len", "world_size"), [(8, 2), (24, 3), (16, 4), (6, 1), (40, 2)])
def test_head_tail_positions_equal_torch_load_balancer(seq_len: int, world_size: int) -> None:
    expected = torch_head_tail_indices(seq_len, world_size)
    for rank in range(world_size):
        got = shard_positions(seq_len, world_size, rank)
        assert got.dtype == torch.long
        assert torch.equal(got, expected[rank].long())


def test_contiguous_positions_are_torch_chunks() -> None:
    chunks = torch.arange(12).chunk(3)
    for rank in range(3):
        assert torch.equal(shard_positions(12, 3, rank, "contiguous"), chunks[rank])


def test_head_tail_example_and_balance() -> None:
    assert shard_positions(8, 2, 0).tolist() == [0, 1, 6, 7]
    assert shard_positions(8, 2, 1).tolist() == [2, 3, 4, 5]
    # Balanced causal work: every rank's queries see the same number of keys in all.
    work = [int((shard_positions(64, 4, r) + 1).sum()) for r in range(4)]
    assert len(set(work)) == 1


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((10, 2, 0), ValueError, r"seq_len=10 must split into 4 equal chunks"),
        ((9, 2, 0, "contiguous"), ValueError, r"seq_len=9 .* 2 equal chunks"),
        ((8, 2, 2), ValueError, r"rank must be < world_size=2, got 2"),
        ((8, 2, -1), ValueError, r"rank must be >= 0"),
        ((8, 0, 0), ValueError, r"world_size must be a positive int"),
        ((8, True, 0), TypeError, r"world_size must be a positive int"),
        ((8.0, 2, 0), TypeError, r"seq_len"),
        ((8, 2, 0, "zigzag"), ValueError, r"balance must be one of \['headtail', 'contiguous'\]"),
    ],
)
def test_shard_positions_bad_input(args: tuple, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        shard_positions(*args)


def test_shard_batch_takes_the_positions_along_each_dim() -> None:
    ids = torch.arange(2 * 12).view(2, 12)
    hidden = torch.randn(12, 2, 5)
    (ids_1, hidden_1), positions = shard_batch([ids, hidden], seq_dims=[1, 0], world_size=3, rank=1)
    assert positions.tolist() == [2, 3, 8, 9]
    assert torch.equal(ids_1, ids[:, positions])
    assert torch.equal(hidden_1, hidden[positions])
    # The shards of all ranks hold every token exactly once.
    every = torch.cat([shard_batch([ids], world_size=3, rank=r)[1] for r in range(3)])
    assert torch.equal(every.sort().values, torch.arange(12))


def test_shard_batch_bad_input() -> None:
    with pytest.raises(ValueError, match="share one sequence length"):
        shard_batch([torch.zeros(1, 8), torch.zeros(1, 6)], world_size=2, rank=0)
    with pytest.raises(ValueError, match=r"seq_dims\[0\]=3 is not a dimension"):
        shard_batch([torch.zeros(1, 8)], seq_dims=3, world_size=2, rank=0)
    with pytest.raises(ValueError, match="both world_size and rank"):
        shard_batch([torch.zeros(1, 8)], world_size=2)
    with pytest.raises(TypeError, match="sequence"):
        shard_batch(torch.zeros(1, 8), world_size=2, rank=0)  # type: ignore[arg-type]
    if not dist.is_initialized():
        with pytest.raises(RuntimeError, match=r"shard_batch: .*not initialised.*pass world_size and rank"):
            shard_batch([torch.zeros(1, 8)])


def test_context_parallel_attention_checks_local_input_before_communicating() -> None:
    q = torch.randn(1, 2, 4, 8)
    pos = torch.arange(4)
    with pytest.raises(ValueError, match="same tokens"):
        context_parallel_attention(q, q[:, :, :3], q, positions=pos)
    with pytest.raises(ValueError, match="positions has length 3"):
        context_parallel_attention(q, q, q, positions=pos[:3])
    with pytest.raises(TypeError, match="causal must be a bool"):
        context_parallel_attention(q, q, q, positions=pos, causal=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"encoding must be a posenc\.PositionalEncoding"):
        context_parallel_attention(q, q, q, "rope", positions=pos)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"balance must be one of \['headtail', 'contiguous'\], got 'zigzag'"
    ):
        context_parallel_attention(q, q, q, positions=pos, balance="zigzag")  # type: ignore[arg-type]
    if not dist.is_initialized():
        # (neither takes world_size and rank: the message does not suggest them)
        with pytest.raises(RuntimeError, match=r"context_parallel_attention: .*not initialised.*torchrun\)$"):
            context_parallel_attention(q, q, q, positions=pos)
        with pytest.raises(RuntimeError, match=r"unshard: .*not initialised.*torchrun\)$"):
            unshard(q)


@pytest.mark.parametrize("name", [n for n in registered_classes() if not n.endswith("2d")])  # 2D: grids
def test_additive_encodings_use_global_positions_on_a_shard(name: str) -> None:
    # Additive encodings act on the embeddings: a shard with its global positions gets exactly
    # the rows of the whole sequence's encoded embeddings.
    enc = make(name, causal=True)
    x = torch.randn(2, 16, DIMS["d_model"], dtype=torch.float64)
    (x_shard,), positions = shard_batch([x], world_size=2, rank=1)
    torch.testing.assert_close(enc.encode_input(x_shard, positions), enc.encode_input(x)[:, positions])


# --- two processes -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(rank: int, fn: Callable[..., None], port: int, world: int, done: str, args: tuple) -> None:
    torch.set_num_threads(1)  # two ranks share the machine's cores
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=60),
    )
    try:
        fn(rank, world, *args)
        dist.barrier()  # leave together: tearing gloo down under a peer's last collective can abort it
        Path(done, str(rank)).touch()  # every check of this rank passed
    finally:
        dist.destroy_process_group()


def run_ranks(fn: Callable[..., None], *args: Any, world: int = 2, timeout: float = SPAWN_TIMEOUT_S) -> None:
    """Run ``fn(rank, world, *args)`` in ``world`` gloo processes; a rank's exception fails the test.

    A rank killed by a signal fails it too, unless every rank had finished its checks and the shared
    barrier: gloo's teardown can abort a process ("terminate called without an active exception") when a
    peer closes its sockets first, which says nothing about the code under test.
    """
    with tempfile.TemporaryDirectory() as done:
        ctx = mp.start_processes(
            _entry, args=(fn, _free_port(), world, done, args), nprocs=world, join=False, start_method="spawn"
        )
        deadline = time.monotonic() + timeout
        try:
            while not ctx.join(timeout=1.0):
                if time.monotonic() > deadline:
                    for p in ctx.processes:
                        if p.is_alive():
                            p.kill()
                    pytest.fail(f"{fn.__name__} did not finish within {timeout:.0f} s on {world} ranks")
        except mp.ProcessExitedException:
            if sorted(p.name for p in Path(done).iterdir()) != [str(r) for r in range(world)]:
                raise


def _attention_rows(rank: int, world: int, names: list[str], seq_len: int) -> None:
    """Every rank: context-parallel output == its rows of the whole attention, per encoding."""
    for name in names:
        for causal in (True, False):
            try:
                enc = make(name, causal)
            except ValueError as err:  # xPos has no bidirectional form: building one raises
                assert not causal and "causal only" in str(err), err
                continue
            gen = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(2, 4, seq_len, 8, generator=gen, dtype=torch.float64) for _ in range(3))
            whole = posenc.attention(q, k, v, enc, causal=causal)
            (q_r, k_r, v_r), positions = shard_batch([q, k, v], seq_dims=2)
            out = context_parallel_attention(q_r, k_r, v_r, enc, positions=positions, causal=causal)
            torch.testing.assert_close(out, whole[:, :, positions], **F64_TOL, msg=f"{name} causal={causal}")
            torch.testing.assert_close(unshard(out, seq_dim=2), whole, **F64_TOL)


def _mismatched_shards(rank: int, world: int) -> None:
    """Ranks with shards of different lengths: every rank raises the same error, none hangs."""
    tl = 4 + rank
    q = torch.randn(1, 2, tl, 8)
    with pytest.raises(ValueError, match=r"ranks hold shards of different shapes.*rank 1: q \(1, 2, 5, 8\)"):
        context_parallel_attention(q, q, q, positions=torch.arange(tl) + 4 * rank)
    # The group still works afterwards: nothing was left half-sent.
    x = torch.ones(1)
    dist.all_reduce(x)
    assert float(x) == world


def _default_run(rank: int, world: int) -> None:
    _attention_rows(rank, world, ["rope", "alibi", "t5", "none"], seq_len=12)
    _mismatched_shards(rank, world)


def test_context_parallel_two_ranks() -> None:
    run_ranks(_default_run)


# --- two processes, slow -------------------------------------------------------------------


def _every_encoding(rank: int, world: int) -> None:
    # 2D (grid) encodings are additive: they act on the embeddings, nowhere in attention.
    names = [n for n in registered_classes() if not n.endswith("2d")]
    _attention_rows(rank, world, names, seq_len=16)


@pytest.mark.slow
def test_context_parallel_every_encoding() -> None:
    run_ranks(_every_encoding)


def _gradients(rank: int, world: int, names: list[str]) -> None:
    """Backward through the gathered keys: each rank's q/k/v and encoding gradients equal the whole's."""
    for name in names:
        enc = make(name, causal=True)
        gen = torch.Generator().manual_seed(1)
        # GQA (4 query heads, 2 kv heads) for encodings that allow it, and per-row positions.
        kv_heads = 2 if name in ("rope", "none") else 4
        q = torch.randn(2, 4, 16, 8, generator=gen, dtype=torch.float64, requires_grad=True)
        k, v = (
            torch.randn(2, kv_heads, 16, 8, generator=gen, dtype=torch.float64, requires_grad=True)
            for _ in range(2)
        )
        weight = torch.randn(2, 4, 16, 8, generator=gen, dtype=torch.float64)
        offset = torch.tensor([[0], [5]])  # row 1 starts at position 5 (a continued sequence)
        whole_positions = torch.arange(16) + offset
        whole = posenc.attention(q, k, v, enc, causal=True, q_positions=whole_positions)
        (whole * weight).sum().backward()
        expected = {"q": q.grad, "k": k.grad, "v": v.grad}
        expected_params = [p.grad.clone() for p in enc.parameters()]
        enc.zero_grad()

        mine = shard_positions(16, world, rank)
        q_r, k_r, v_r = (t.detach()[:, :, mine].requires_grad_() for t in (q, k, v))
        out = context_parallel_attention(q_r, k_r, v_r, enc, positions=whole_positions[:, mine])
        (out * weight[:, :, mine]).sum().backward()
        for label, t in {"q": q_r, "k": k_r, "v": v_r}.items():
            torch.testing.assert_close(t.grad, expected[label][:, :, mine], **F64_TOL, msg=f"{name} d{label}")
        for p, exp in zip(enc.parameters(), expected_params, strict=True):
            grad = p.grad.clone()
            dist.all_reduce(grad)  # each rank holds the part of its own queries
            torch.testing.assert_close(grad, exp, **F64_TOL, msg=f"{name} parameter gradient")


@pytest.mark.slow
def test_context_parallel_gradients() -> None:
    names = ["rope", "alibi", "t5", "none"] + (["shaw"] if "shaw" in posenc.available() else [])
    run_ranks(_gradients, names)


def _packed_documents(rank: int, world: int) -> None:
    """Packed documents sharded head-tail: each query sees only earlier keys of its own document."""
    gen = torch.Generator().manual_seed(2)
    ids = torch.tensor([[0] * 5 + [1] * 9 + [2] * 2, [4] * 16])  # row 1: one document
    positions = posenc.document_positions(ids)
    q, k, v = (torch.randn(2, 4, 16, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    for name in ("rope", "alibi", "t5"):
        enc = make(name, causal=True)
        whole = posenc.attention(q, k, v, enc, causal=True, document_ids=ids)
        (q_r, k_r, v_r), mine = shard_batch([q, k, v], seq_dims=2)
        out = context_parallel_attention(
            q_r, k_r, v_r, enc, positions=positions[:, mine], document_ids=ids[:, mine]
        )
        torch.testing.assert_close(out, whole[:, :, mine], **F64_TOL, msg=name)


@pytest.mark.slow
def test_context_parallel_packed_documents() -> None:
    run_ranks(_packed_documents)


def packed_layouts() -> dict[str, torch.Tensor]:
    """Every packed layout of the unsharded tests, ids recurring for non-adjacent documents included."""
    from test_packed import packed_ids  # tests/test_packed.py's rows: ids 40/41 alternate

    gen = torch.Generator().manual_seed(3)
    return {
        "issue": torch.tensor([[0] * 8 + [1] * 8 + [0] * 8]),  # document 0 recurs after document 1
        "test_packed": packed_ids(),  # (2, 14): documents 5, 3, 6 and 2, 9, 3 tokens
        "test_packed_unique": packed_ids(unique=True),
        "test_distributed": torch.tensor([[0] * 5 + [1] * 9 + [2] * 2, [4] * 16]),
        "1d_recurring": torch.tensor([7, 7, 2, 2, 2, 7, 7, 7, 2, 2, 7, 2]),
        "random_two_ids": torch.randint(0, 2, (2, 16), generator=gen),  # many short runs, ids recur
        "one_token_documents": torch.arange(8) % 3,
    }


def _packed_layouts(rank: int, world: int) -> None:
    """shard_batch -> context_parallel_attention -> unshard equals posenc.attention on every layout."""
    for label, ids in packed_layouts().items():
        t = ids.shape[-1]
        gen = torch.Generator().manual_seed(t)
        batch = ids.shape[0] if ids.dim() == 2 else 2
        q, k, v = (torch.randn(batch, 4, t, 8, generator=gen, dtype=torch.float64) for _ in range(3))
        positions = posenc.document_positions(ids)
        balances = [b for b, n in (("headtail", 2 * world), ("contiguous", world)) if t % n == 0]
        for name, causal, balance in itertools.product(("alibi", "rope", "t5"), (True, False), balances):
            enc = make(name, causal)
            whole = posenc.attention(q, k, v, enc, causal=causal, document_ids=ids)
            (q_r, k_r, v_r, ids_r, pos_r), _ = shard_batch(
                [q, k, v, ids, positions], seq_dims=[2, 2, 2, -1, -1], balance=balance
            )
            out = context_parallel_attention(
                q_r, k_r, v_r, enc, positions=pos_r, document_ids=ids_r, causal=causal, balance=balance
            )
            msg = f"{label} {name} causal={causal} balance={balance}"
            torch.testing.assert_close(unshard(out, seq_dim=2, balance=balance), whole, **F64_TOL, msg=msg)


def test_context_parallel_packed_layouts_equal_unsharded() -> None:
    """A document is a run of equal ids on both paths, also when an id recurs (e.g. [0]*8 + [1]*8 + [0]*8)."""
    run_ranks(_packed_layouts)


def _torch_sharding(rank: int, world: int) -> None:
    """torch's own context-parallel sharding puts the tokens where shard_positions says."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental._attention import (
        _context_parallel_shard,
        _HeadTailLoadBalancer,
    )

    mesh = init_device_mesh("cpu", (world,))
    seq = torch.arange(3 * 16).view(3, 16) * 10
    balancer = _HeadTailLoadBalancer(16, world, torch.device("cpu"))
    (theirs,) = _context_parallel_shard(mesh, [seq], [1], load_balancer=balancer)
    (ours,), _ = shard_batch([seq])
    assert torch.equal(theirs, ours)


@pytest.mark.slow
def test_shard_batch_equals_torch_context_parallel_shard() -> None:
    run_ranks(_torch_sharding)


MODEL = {"vocab_size": 32, "d_model": 16, "num_layers": 2, "num_heads": 2, "max_len": 32}
#: Every registered 1-D encoding (its parameters included: T5's, Shaw's, FIRE's, KERPLE's tables live
#: once, on the model) and Shaw's value term.
MODEL_ENCODINGS = [*registered_classes(), "shaw(values=True)"]


def test_no_encoding_has_a_parameter_fsdp2_cannot_shard() -> None:
    """FSDP2's fully_shard refuses 0-d parameters (FIRE's c and threshold were 0-d)."""
    for name in MODEL_ENCODINGS:
        model = posenc.nn.TransformerLM(position=name, **MODEL)
        scalars = [key for key, p in model.named_parameters() if p.dim() == 0]
        assert not scalars, f"{name}: 0-d parameters {scalars}"


def _reference_model(name: str) -> posenc.nn.TransformerLM:
    torch.manual_seed(3)
    model = posenc.nn.TransformerLM(position=name, **MODEL)
    with torch.no_grad():  # non-zero encoding parameters, so that their gradients matter
        for p in model.encoding.parameters():
            p.normal_(std=0.5)
    return model


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(0, MODEL["vocab_size"], (4, 12), generator=gen)
    return ids[:, :-1], ids[:, 1:]


def _loss(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _fsdp(rank: int, world: int) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    inputs, targets = _batch()
    mine = slice(rank * 2, rank * 2 + 2)  # each rank trains on its half of the batch
    for name in MODEL_ENCODINGS:
        ref = _reference_model(name)
        with torch.device("meta"):
            model = posenc.nn.TransformerLM(position=name, **MODEL)
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        model.to_empty(device="cpu")
        model.reset_parameters()
        for key, p in model.named_parameters():  # re-initialised: none of to_empty()'s garbage is left
            assert bool(p.full_tensor().isfinite().all()), f"{name}: {key} not initialised"
        # reset_parameters rebuilt the caches (not sharded: buffers stay whole on each rank).
        for (key, buf), (_, ref_buf) in zip(model.named_buffers(), ref.named_buffers(), strict=True):
            torch.testing.assert_close(buf, ref_buf, msg=f"{name} buffer {key}")
        set_model_state_dict(model, ref.state_dict(), options=StateDictOptions(full_state_dict=True))

        # The optimizer holds the sharded parameters: made before any forward, since FSDP2 keeps
        # the root's parameters unsharded after a forward until the backward.
        optim = torch.optim.SGD(model.parameters(), lr=0.5)
        ref_optim = torch.optim.SGD(ref.parameters(), lr=0.5)
        torch.testing.assert_close(model(inputs[mine]), ref(inputs[mine]), **MODEL_TOL, msg=name)
        _loss(model, inputs[mine], targets[mine]).backward()  # FSDP averages over ranks
        _loss(ref, inputs, targets).backward()
        ref_params = dict(ref.named_parameters())
        for key, p in model.named_parameters():
            full = p.grad.full_tensor()
            torch.testing.assert_close(full, ref_params[key].grad, **MODEL_TOL, msg=f"{name} grad {key}")
        optim.step()
        ref_optim.step()
        with torch.no_grad():
            torch.testing.assert_close(model(inputs[mine]), ref(inputs[mine]), **MODEL_TOL, msg=name)


@pytest.mark.slow
def test_fsdp2_from_meta_equals_unsharded_model() -> None:
    run_ranks(_fsdp)


def _ddp(rank: int, world: int) -> None:
    from torch.nn.parallel import DistributedDataParallel

    inputs, targets = _batch()
    mine = slice(rank * 2, rank * 2 + 2)
    for name in MODEL_ENCODINGS:
        ref = _reference_model(name)
        model = DistributedDataParallel(copy.deepcopy(ref))
        optim = torch.optim.SGD(model.parameters(), lr=0.5)
        ref_optim = torch.optim.SGD(ref.parameters(), lr=0.5)
        for _ in range(2):
            optim.zero_grad()
            ref_optim.zero_grad()
            _loss(model, inputs[mine], targets[mine]).backward()  # DDP averages over ranks
            _loss(ref, inputs, targets).backward()
            optim.step()
            ref_optim.step()
        for (key, p), ref_p in zip(model.module.named_parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p, ref_p, **MODEL_TOL, msg=f"{name} {key}")


@pytest.mark.slow
def test_ddp_step_equals_single_process_step() -> None:
    run_ranks(_ddp)


@pytest.mark.slow
def test_context_parallel_example_runs_under_torchrun(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        str(root / "examples" / "context_parallel.py"),
    ]
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # torchrun's own temporary files stay in the test's folder
    done = subprocess.run(
        command, cwd=root, capture_output=True, text=True, timeout=SPAWN_TIMEOUT_S, check=False, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for spec in ("rope", "alibi", "t5", "none"):
        assert f"{spec}: rank 0 holds positions [0, 1, 2]..[61, 62, 63]" in done.stdout


@pytest.mark.parametrize(
    "encoding",
    [posenc.MRoPE(8, mrope_section=[2, 1, 1]), posenc.AxialRoPE(8, num_axes=2)],
    ids=["mrope", "axial"],
)
def test_causal_context_parallel_refuses_positions_with_axes(encoding):
    """Their causal mask follows the tokens' order in the call, which a shard does not hold (sharded rows came
    out off by 2.2): refused before any communication; without causality they need no order."""
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(
        ValueError, match="positions have axes, and its causal mask follows the tokens' order"
    ):
        context_parallel_attention(q, q, q, encoding, positions=torch.arange(4))
