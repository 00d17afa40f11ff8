"""Ready for the GPU without owning one: no host sync and no CPU tensor inside any forward.

Two checks over the same paths (every registered encoding's hooks and drop-in call,
``posenc.attention``, and ``TransformerLM``: training forward, prefill, a KV-cache decode step,
a static-cache decode step, padded and packed batches, a per-layer schedule):

* **fake CUDA** (a CUDA build of torch, no GPU needed): under ``FakeTensorMode`` the modules and
  inputs claim to be on ``cuda``, so mixing in a CPU tensor fails as on a GPU and a host sync
  (``.item()``, ``int(t)``, ``bool(t)``, ``nonzero``, ``.tolist()``) raises. Skipped, with the
  reason, on the CPU wheel. Backward needs a real device there: it is covered on the CPU. A copy
  of a CPU tensor onto the device inside a forward (``torch.tensor(list, device=...)``) fails the
  test too: on a GPU it waits for the stream, and a CUDA graph cannot capture it (a non-blocking copy,
  context parallelism's shape check, is queued instead: not counted).
* **counted on the CPU** (any torch): inside :func:`posenc._compat.accelerator_paths` CPU tensors
  take the code an accelerator takes, and a dispatch mode counts the operations that would wait
  for the device: zero, forward and backward. The counter also proves that a static-cache decode
  step runs the same operations on the same shapes at every step (what a CUDA graph replays).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from entries_table import ENTRIES, Entry, drop_in_call, make_input, make_qk
from sync_tools import CUDA_BUILD, NO_CUDA_BUILD_REASON, HostToDevice, SyncCounter, fake_cuda

import posenc
from posenc._compat import accelerator_paths
from posenc.nn import KVCache, TransformerLM

needs_cuda_build = pytest.mark.skipif(not CUDA_BUILD, reason=NO_CUDA_BUILD_REASON)

VOCAB = 32
B, T = 2, 6

#: Registered encodings that the entries table has no row for yet (its generic tests would call
#: Transformer-XL's drop-in forward without the keys it needs): covered here by hand.
BEYOND_TABLE = (Entry("transformer-xl", "transformer_xl", hooks=frozenset({"bias"}), content=True),)


@contextlib.contextmanager
def _counted() -> Iterator[SyncCounter]:
    """CPU tensors on the accelerator's code path, every host sync counted; fails on any."""
    with accelerator_paths(), SyncCounter() as counter:
        yield counter
    assert counter.syncs == [], "host syncs:\n" + "\n".join(counter.syncs)


@contextlib.contextmanager
def _where(mode: str) -> Iterator[torch.device]:
    if mode == "fake-cuda":
        if not CUDA_BUILD:
            pytest.skip(NO_CUDA_BUILD_REASON)
        with fake_cuda() as device, HostToDevice() as copies:
            yield device
        assert copies.copies == [], "host-to-device copies in a forward:\n" + "\n".join(copies.copies)
    else:
        with _counted():
            yield torch.device("cpu")


MODES = [pytest.param("fake-cuda", marks=needs_cuda_build), "cpu-counted"]


def _on(device: torch.device, *tensors: Any) -> Any:
    out = tuple(t if t is None else t.to(device) for t in tensors)
    return out if len(out) > 1 else out[0]


def _check_device(outputs: Any, device: torch.device) -> None:
    for out in outputs if isinstance(outputs, (tuple, list)) else (outputs,):
        if isinstance(out, torch.Tensor):
            assert out.device.type == device.type, f"an output is on {out.device}, not {device}"


# --- every encoding's hooks -----------------------------------------------------------------------------


def _build(make: Callable[[], Any], device: torch.device) -> Any:
    """A module made on ``device`` (fake parameters cannot be moved there by ``.to()``)."""
    with device:
        return make()


def _hooks(entry: Entry, device: torch.device) -> None:
    """Each hook at default and explicit (per-row) positions, a decode-shaped call, the drop-in call."""
    module = _build(entry.build, device)
    length = entry.fixed_len or T
    g = torch.Generator().manual_seed(0)
    if "input" in entry.hooks:
        x = _on(device, make_input(entry, B, length, torch.float32, generator=g))
        _check_device(module.encode_input(x), device)
        if entry.fixed_len is None:
            rows = _on(device, torch.tensor([[3, 4, 5, 6, 7, 9], [0, 1, 2, 3, 4, 5]]))
            _check_device(module.encode_input(x, rows), device)
    if entry.hooks & {"qk", "bias"}:
        q, k = _on(device, *make_qk(entry, B, length, length, torch.float32, generator=g))
        q_pos, k_pos = entry.qk_positions(length, length, None, None)
        q_pos, k_pos = _on(device, q_pos, k_pos)
        _check_device(module.encode_qk(q, k, q_positions=q_pos, k_positions=k_pos), device)
        _check_device(module.attention_bias(q, k, q_positions=q_pos, k_positions=k_pos), device)
        explicit = torch.tensor([[2, 3, 5, 8, 9, 10], [0, 1, 2, 3, 4, 5]])
        if entry.grid_len is None:
            q_pos, k_pos = _on(device, *entry.qk_positions(length, length, explicit, explicit))
            _check_device(module.encode_qk(q, k, q_positions=q_pos, k_positions=k_pos), device)
            _check_device(module.attention_bias(q, k, q_positions=q_pos, k_positions=k_pos), device)
            if not getattr(module, "values", False):  # a value term has no score_mod (it says so)
                module.score_mod(q, k, q_positions=q_pos, k_positions=k_pos)  # FlexAttention's form
            # a decode step: one query at the last position, every key
            q1 = q[:, :, -1:]
            q_pos, k_pos = _on(device, *entry.qk_positions(1, length, explicit[:, -1:], explicit))
            _check_device(module.encode_qk(q1, k, q_positions=q_pos, k_positions=k_pos), device)
            _check_device(module.attention_bias(q1, k, q_positions=q_pos, k_positions=k_pos), device)
    if entry.spec == "transformer_xl":  # forward(scores, q, k)
        scores = torch.zeros(B, entry.num_heads, length, length, device=device)
        _check_device(module(scores, q, k), device)
    else:
        _check_device(drop_in_call(module, entry, B, length, torch.float32, device=device), device)


@pytest.mark.parametrize("mode", MODES)
def test_hooks_without_sync(entry: Entry, mode: str) -> None:
    with _where(mode) as device:
        _hooks(entry, device)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("extra", BEYOND_TABLE, ids=[e.id for e in BEYOND_TABLE])
def test_hooks_and_attention_beyond_the_table_without_sync(extra: Entry, mode: str) -> None:
    with _where(mode) as device:
        _hooks(extra, device)
        _attention(extra, device)


# --- posenc.attention ---------------------------------------------------------------------------------------


def _attention(entry: Entry, device: torch.device) -> None:
    module = _build(entry.build, device)
    causal = entry.sizes["causal"]
    length = entry.fixed_len or entry.grid_len or T
    g = torch.Generator().manual_seed(1)
    q, k = make_qk(entry, B, length, length, torch.float32, generator=g)
    v = torch.randn(q.shape, generator=g)
    q, k, v = _on(device, q, k, v)
    _check_device(posenc.attention(q, k, v, module, causal=causal), device)
    pad = torch.ones(B, length, dtype=torch.bool)
    pad[0, :2] = False
    mask = _on(device, pad[:, None, None, :])
    _check_device(posenc.attention(q, k, v, module, causal=causal, attn_mask=mask), device)
    if entry.grid_len is None:
        explicit = torch.tensor([[2, 3, 5, 8, 9, 10], [0, 1, 2, 3, 4, 5]])
        q_pos, k_pos = _on(device, *entry.qk_positions(length, length, explicit, explicit))
        out = posenc.attention(q, k, v, module, causal=causal, q_positions=q_pos, k_positions=k_pos)
        _check_device(out, device)
        docs = _on(device, torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 2]]))
        for backend in ("auto", "chunked"):
            kwargs = {"chunk_size": 2} if backend == "chunked" else {}
            out = posenc.attention(
                q, k, v, module, causal=causal, document_ids=docs, backend=backend, **kwargs
            )
            _check_device(out, device)
        if causal:  # a sliding window
            _check_device(posenc.attention(q, k, v, module, causal=True, window=3), device)


@pytest.mark.parametrize("mode", MODES)
def test_attention_without_sync(attention_entry: Entry, mode: str) -> None:
    with _where(mode) as device:
        _attention(attention_entry, device)


# --- TransformerLM --------------------------------------------------------------------------------------------

#: Sequence models of the table (not a fixed 2D grid) as a TransformerLM's encoding.
LM_ENTRIES = [e for e in ENTRIES if e.fixed_len is None and e.grid_len is None and not e.variant]
LM_ENTRIES += BEYOND_TABLE


def _model(entry: Entry | str | list[str], device: torch.device, **kwargs: Any) -> TransformerLM:
    if isinstance(entry, Entry):
        heads, dh = entry.num_heads, entry.head_dim
        d = heads * dh
        causal = entry.sizes["causal"]
        position: Any = _build(lambda: entry.build(d_model=d), device)
    else:
        heads, d, causal, position = 4, 32, True, entry
    torch.manual_seed(0)
    return _build(
        lambda: TransformerLM(VOCAB, d, 2, heads, position=position, max_len=64, causal=causal, **kwargs),
        device,
    ).eval()


def _ids(device: torch.device, t: int = T) -> torch.Tensor:
    return _on(device, torch.randint(0, VOCAB, (B, t), generator=torch.Generator().manual_seed(2)))


def _lm_paths(model: TransformerLM, device: torch.device) -> None:
    ids = _ids(device, T + 3)
    _check_device(model(ids), device)  # training-style forward (eval: no dropout)
    pad = torch.ones(B, T + 3, dtype=torch.bool)
    pad[0, :3] = False
    pad = _on(device, pad)
    _check_device(model(ids, attention_mask=pad), device)
    docs = _on(device, torch.tensor([[0] * 4 + [1] * 5, [0] * 2 + [1] * 3 + [2] * 4]))
    _check_device(model(ids, document_ids=docs), device)
    if not model.causal:
        return
    # prefill, then two decode steps, with a growing cache (plain and padded)
    for mask in (None, pad):
        cache = KVCache()
        m = None if mask is None else mask[:, :T]
        _check_device(model(ids[:, :T], cache=cache, attention_mask=m), device)
        for i in range(T, T + 2):
            m = None if mask is None else mask[:, : i + 1]
            _check_device(model(ids[:, i : i + 1], cache=cache, attention_mask=m), device)
    # a prefill at explicit positions, then default positions continue from them
    cache = KVCache()
    start = _on(device, torch.arange(100, 100 + T))
    model(ids[:, :T], positions=start, cache=cache)
    _check_device(model(ids[:, T : T + 1], cache=cache), device)
    # a static cache: prefill, then decode steps
    cache = KVCache(capacity=T + 4)
    _check_device(model(ids[:, :T], cache=cache), device)
    for i in range(T, T + 2):
        _check_device(model(ids[:, i : i + 1], cache=cache), device)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("lm_entry", LM_ENTRIES, ids=[e.id for e in LM_ENTRIES])
def test_transformer_lm_without_sync(lm_entry: Entry, mode: str) -> None:
    with _where(mode) as device:
        _lm_paths(_model(lm_entry, device), device)


@pytest.mark.parametrize("mode", MODES)
def test_per_layer_schedule_without_sync(mode: str) -> None:
    """Per-layer encodings (RoPE with NoPE, a T5 bias layer) and per-layer windows."""
    with _where(mode) as device:
        model = _model(["rope", "t5"], device, window=[4, None])
        _lm_paths(model, device)
        _lm_paths(_model("rope*1 + llama4_nope", device), device)


@pytest.mark.parametrize("mode", MODES)
def test_attention_sinks_without_sync(mode: str) -> None:
    """Learned attention sinks (``attention_sinks=True``) on every LM path, the decode steps included."""
    with _where(mode) as device:
        for spec in ("rope", "alibi", "shaw"):
            _lm_paths(_model(spec, device, attention_sinks=True), device)


@needs_cuda_build
def test_flex_block_mask_without_a_host_copy() -> None:
    """FlexAttention's block mask (``backend="flex"``) takes its constants (offset, window, the
    strides of the user's mask) as device fills, not copies from the host. Flex itself needs a
    compile, which fake tensors do not run: its mask is built here on its own."""
    from posenc._flex import flex_block_mask
    from posenc.masking import Visibility

    with fake_cuda() as device, HostToDevice() as copies:
        user = torch.ones(1, 1, 8, 8, dtype=torch.bool, device=device)
        vis = Visibility(tq=8, tk=8, device=device, user=user, causal=True, window=4)
        assert flex_block_mask(vis, 1, 2) is not None
    assert copies.copies == [], copies.copies


@needs_cuda_build
def test_forwards_outside_the_default_paths_copy_nothing_from_the_host() -> None:
    """Each built a small tensor from Python values on the device in every call (a blocking copy, which waits
    for the GPU's queue): context parallelism's shape check (every layer of every step), Learned2D's
    "bucketize" lookup (Idefics, SmolVLM), dynamic NTK past its trained length (a prefill), ALiBi called in
    the other of float32 and float64."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from posenc.distributed import context_parallel_attention, shard_positions, unshard

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        with fake_cuda() as device, HostToDevice() as copies:
            with device:
                rope = posenc.build("rope", head_dim=8)
                dynamic = posenc.build(
                    "rope(scaling={'rope_type': 'dynamic', 'factor': 2.0})", head_dim=8, max_len=16
                )
                grid = posenc.build("learned2d(grid_size=(4, 4), mode='bucketize')", d_model=16)
                alibi, alibi64 = posenc.ALiBi(4), posenc.ALiBi(4).double()
            q, k, v = (torch.randn(1, 4, 4, 8, device=device) for _ in range(3))
            context_parallel_attention(q, k, v, rope, positions=shard_positions(8, 2, 0, device=device))
            unshard(torch.randn(1, 4, 8, device=device))
            dynamic.encode_qk(*(torch.randn(1, 2, 40, 8, device=device) for _ in range(2)))
            grid.encode_input(torch.randn(2, 6, 5, 16, device=device))
            posenc.attention(q.double(), k.double(), v.double(), alibi, causal=True)
            posenc.attention(q, k, v, alibi64, causal=True)
    finally:
        dist.destroy_process_group()
    assert copies.copies == [], copies.copies


@needs_cuda_build
def test_auto_takes_the_gpu_budget_for_a_half_precision_bias() -> None:
    """On CUDA a bfloat16 bias (a GPU kernel's mask dtype: no Toeplitz view) goes to one SDPA call
    while its dense form fits in ``BIAS_BUDGET_BYTES["cuda"]`` (1 GiB) and above it to chunks of as
    many rows as fit: on an H100 chunks of the CPU's 64 MiB cost up to 7.6x the single call with the
    backward. Under fake CUDA SDPA runs its math kernel, one softmax per call."""
    calls = {}
    for t in (2048, 8192):  # the dense (1, 16, t, t) bfloat16 bias: 128 MiB, then 2 GiB
        with fake_cuda() as device:
            encoding = _build(lambda: posenc.build("t5", num_heads=16, head_dim=64, causal=True), device)
            q, k, v = (torch.randn(1, 16, t, 64, device=device, dtype=torch.bfloat16) for _ in range(3))
            with SyncCounter(shapes=True) as counter:
                posenc.attention(q, k, v, encoding, causal=True)
        assert counter.shapes is not None
        calls[t] = sum("softmax" in op for op, _ in counter.shapes)
    assert calls == {2048: 1, 8192: 2}


def test_backward_without_sync() -> None:
    """Training: a forward and backward on the accelerator's path make no host sync (on the CPU:
    backward on fake CUDA needs a real device)."""
    for spec in (
        "rope",
        "alibi",
        "t5",
        "learned",
        "transformer_xl",
        "fire",
        "shaw",
        "llama4_nope",
        "rope+sinks",
    ):
        name, _, sinks = spec.partition("+")
        model = _model(name, torch.device("cpu"), attention_sinks=bool(sinks)).train()
        ids = _ids(torch.device("cpu"))
        pad = torch.ones(B, T, dtype=torch.bool)
        pad[1, :2] = False
        with _counted():
            loss = model(ids, attention_mask=pad).logsumexp(-1).mean()
            loss.backward()
        grads = [p.grad for p in model.parameters() if p.requires_grad]
        assert all(g is not None for g in grads), spec


# --- the static cache: what a CUDA graph captures -------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    ["rope", "alibi", "t5", "sinusoidal", "mrope", "transformer_xl", "xpos", "rope+sinks", "alibi+sinks"],
)
def test_static_decode_step_is_capturable(spec: str) -> None:
    """No host sync, and the same operations on the same shapes at every step: a decode step with
    ``KVCache(capacity=n)`` could be captured once in a CUDA graph and replayed (``+sinks``: with
    learned attention sinks)."""
    cpu = torch.device("cpu")
    name, _, sinks = spec.partition("+")
    model = _model(name, cpu, attention_sinks=bool(sinks))
    ids = _ids(cpu, T + 3)
    cache = KVCache(capacity=16)
    model(ids[:, :T], cache=cache)
    traces = []
    for i in range(T, T + 3):
        with accelerator_paths(), SyncCounter(shapes=True) as counter, torch.no_grad():
            model(ids[:, i : i + 1], cache=cache)
        assert counter.syncs == [], counter.syncs
        traces.append(counter.shapes)
    assert traces[0] == traces[1] == traces[2]
    assert cache.keys[0].shape[-2] == 16 and len(cache) == T + 3


def _assert_raises_on_device(call: Callable[[], Any], message: str) -> None:
    """On the accelerator's path a bad input fails in the kernel (``torch._assert_async``)."""
    with accelerator_paths(), pytest.raises(RuntimeError, match=message):
        call()


def test_checks_stay_without_a_sync() -> None:
    """Validation is kept on the accelerator's path, as device-side asserts."""
    rope = posenc.build("rope", head_dim=8)
    q = torch.randn(1, 2, 3, 8)
    _assert_raises_on_device(
        lambda: rope(q, q, torch.tensor([0, -1, 2]), torch.tensor([0, 1, 2])), "must be non-negative"
    )
    learned = posenc.build("learned", d_model=8, max_len=4)
    x = torch.randn(1, 3, 8)
    _assert_raises_on_device(lambda: learned(x, torch.tensor([0, 1, 9])), "beyond the learned table")
    model = _model("rope", torch.device("cpu"))
    _assert_raises_on_device(lambda: model(torch.tensor([[1, VOCAB]])), "input_ids must lie in")
    cache = KVCache(capacity=3)
    model(torch.tensor([[1, 2]]), cache=cache)
    _assert_raises_on_device(lambda: model(torch.tensor([[1, 2]]), cache=cache), "overflows")


@pytest.mark.slow
def test_static_decode_step_compiles_to_one_graph() -> None:
    """``torch.compile(fullgraph=True)`` of a static-cache decode step: one graph for every step
    (no recompile, no graph break) and the full forward's logits. ~40 s on a 2-core CPU; what
    ``mode="reduce-overhead"`` then captures in a CUDA graph on a GPU."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = _model("rope", torch.device("cpu"))
    ids = _ids(torch.device("cpu"), T + 4)
    with torch.no_grad():
        full = model(ids)
        cache = KVCache(capacity=16)
        model(ids[:, :T], cache=cache)
        step = torch.compile(lambda x: model(x, cache=cache), fullgraph=True, dynamic=False)
        outs = [step(ids[:, i : i + 1]) for i in range(T, T + 4)]
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["recompiles"]
    torch.testing.assert_close(torch.cat(outs, dim=1), full[:, T:], rtol=1e-5, atol=1e-5)


@needs_cuda_build
def test_prepare_on_an_accelerator_named_without_an_index_keeps_the_index_a_tensor_gets():
    """``prepare(t, device="cuda")``: default positions, made only when read, sit where a tensor
    made there would ("cuda:0"), so RoPE's table (on "cuda:0") still serves them."""
    with fake_cuda():
        rope = posenc.RoPE(16).to("cuda")
        state = rope.prepare(4, device="cuda")
        assert state._q_positions.device == rope._cos_sin.device == torch.device("cuda", 0)
        assert rope._table_rows(state, "q", torch.float32) is not None
