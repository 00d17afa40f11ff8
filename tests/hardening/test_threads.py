"""Thread safety of caches: concurrent forward calls on ONE module from several threads, with
caches growing while other threads read them, give the same results as single-threaded calls."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import torch
from entries_table import Entry, make_input, make_qk

import posenc

THREADS = 8
ROUNDS = 3
#: Lengths chosen so that calls cross the initial table sizes in an interleaved order: each
#: thread starts at a different length, so tables grow while other threads read them.
LENGTHS = [5, 700, 64, 2100, 300, 1500, 9, 4200]


def _calls(entry: Entry, length: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = make_input(entry, 1, length, torch.float32, generator=gen)
    q, k = make_qk(entry, 1, min(length, 64), length, torch.float32, generator=gen)
    positions = torch.randint(0, 3 * length, (length,), generator=gen)
    return x, q, k, positions


def _run(module: posenc.PositionalEncoding, entry: Entry, length: int, seed: int) -> list[torch.Tensor]:
    x, q, k, positions = _calls(entry, length, seed)
    outs = [module.encode_input(x)]
    if entry.max_position is None and entry.fixed_len is None:
        outs.append(module.encode_input(x, positions))
    tq, tk = q.shape[-2], k.shape[-2]
    q_pos, k_pos = entry.qk_positions(tq, tk, None, None)  # on axes; explicit off an axial grid
    outs += module.encode_qk(q, k, q_positions=q_pos, k_positions=k_pos)
    q_pos, k_pos = entry.qk_positions(tq, tk, positions[-tq:], positions)
    outs += module.encode_qk(q, k, q_positions=q_pos, k_positions=k_pos)
    bias = module.attention_bias(q, k)
    outs += [] if bias is None else [bias]
    return outs


def test_concurrent_calls_on_one_module_match_single_threaded(main_entry: Entry) -> None:
    entry = main_entry  # the variants of a row's code (other constants) run with -m slow
    shared = entry.build(max_len=4 if entry.max_position is None else entry.sizes["max_len"])
    reference = entry.build(max_len=4 if entry.max_position is None else entry.sizes["max_len"])
    reference.load_state_dict(shared.state_dict())
    jobs = []
    for round_ in range(ROUNDS):
        for i, length in enumerate(LENGTHS):
            if entry.fixed_len is not None:
                length = entry.fixed_len
            elif entry.max_position is not None:
                length = min(length, entry.max_position + 1) // 3 or 1  # positions < 3 * length
            jobs.append((length, 1000 * round_ + i))
    expected = {job: _run(reference, entry, *job) for job in jobs}

    barrier = threading.Barrier(THREADS)

    def worker(index: int) -> list[tuple[tuple[int, int], list[torch.Tensor]]]:
        barrier.wait()  # start together, so that growth and reads overlap
        return [(job, _run(shared, entry, *job)) for job in jobs[index::THREADS]]

    torch_threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # the parallelism under test is Python threads, not intra-op
        with ThreadPoolExecutor(THREADS) as pool:
            results = [r for chunk in pool.map(worker, range(THREADS)) for r in chunk]
    finally:
        torch.set_num_threads(torch_threads)
    assert len(results) == len(jobs)
    for job, outs in results:
        for got, want in zip(outs, expected[job], strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def _race(make_call, inputs: list, threads: int = THREADS, trials: int = 40) -> None:
    """``trials`` times: a fresh ``call = make_call()`` run over ``inputs`` from ``threads`` threads
    at once (one torch thread each); any error fails."""
    torch_threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # the parallelism under test is Python threads, not intra-op
        for _ in range(trials):
            barrier = threading.Barrier(threads)
            call = make_call()

            def worker(index: int, barrier=barrier, call=call) -> None:
                barrier.wait()
                for x in (inputs * 2)[index : index + len(inputs)]:
                    call(x)

            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(worker, range(threads)))
    finally:
        torch.set_num_threads(torch_threads)


def test_sinusoidal_lengths_past_the_table_from_many_threads() -> None:
    """Threads read one module at lengths within and past its table at once (the table once grew
    here, and a thread that grew it to 2048 rows replaced another's 4096: 23% of trials)."""
    inputs = [torch.randn(1, length, 16) for length in LENGTHS]
    expected = {x.shape[1]: posenc.Sinusoidal(16)(x) for x in inputs}

    def make_call():
        module = posenc.Sinusoidal(16, max_len=4)  # most lengths are past its table
        return lambda x: torch.testing.assert_close(module(x), expected[x.shape[1]], rtol=0, atol=0)

    _race(make_call, inputs)


def test_2d_grids_of_many_sizes_from_many_threads() -> None:
    """Threads encode patch grids of different sizes through one module without a fixed grid."""
    inputs = [torch.randn(1, h, w, 16) for h, w in ((4, 4), (8, 6), (3, 9), (16, 16))]
    expected = {x.shape: posenc.Sinusoidal2D(16)(x) for x in inputs}

    def make_call():
        module = posenc.Sinusoidal2D(16)
        return lambda x: torch.testing.assert_close(module(x), expected[x.shape], rtol=0, atol=0)

    _race(make_call, inputs)
