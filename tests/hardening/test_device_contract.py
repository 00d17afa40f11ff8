"""The contract on every device of this machine (the ``device`` fixture of ``conftest.py``).

On the CPU these run the CPU; on a GPU machine they also run ``cuda`` with no edits: every hook
and ``posenc.attention`` on the device agree with the CPU, the outputs and caches stay on the
device, and a ``TransformerLM`` decodes (growing and static caches) to its full forward, trains
to the CPU's gradients, and on CUDA runs forward and decode with
``torch.cuda.set_sync_debug_mode("error")``: a host sync fails the test. On CUDA a static-cache
decode step is also captured in a CUDA graph and replayed.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator

import pytest
import torch
from entries_table import ENTRIES, Entry, make_input, make_qk

import posenc
from posenc.nn import KVCache, TransformerLM

TOL = {"rtol": 2e-5, "atol": 2e-5}


@contextlib.contextmanager
def _no_sync(device: torch.device) -> Iterator[None]:
    """On CUDA, any host sync inside raises (torch's sync debug mode); elsewhere nothing."""
    if device.type != "cuda":
        yield
        return
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def _same(on_device: object, on_cpu: object, device: torch.device) -> None:
    if on_device is None or on_cpu is None:
        assert on_device is None and on_cpu is None
        return
    if isinstance(on_device, (tuple, list)):
        for a, b in zip(on_device, on_cpu, strict=True):  # type: ignore[arg-type]
            _same(a, b, device)
        return
    assert isinstance(on_device, torch.Tensor) and isinstance(on_cpu, torch.Tensor)
    assert on_device.device.type == device.type
    torch.testing.assert_close(on_device.cpu(), on_cpu, **TOL)


def test_hooks_on_device_match_the_cpu(entry: Entry, device: torch.device) -> None:
    cpu = entry.build()
    module = copy.deepcopy(cpu).to(device)
    for name, buffer in module.named_buffers():
        assert buffer.device.type == device.type, f"{name} stayed on {buffer.device}"
    length = entry.fixed_len or entry.grid_len or 7
    g = torch.Generator().manual_seed(0)
    x = make_input(entry, 2, length, torch.float32, generator=g)
    q, k = make_qk(entry, 2, length, length, torch.float32, generator=g)
    forms: list[tuple[torch.Tensor | None, torch.Tensor | None]] = [
        entry.qk_positions(length, length, None, None)
    ]
    if entry.grid_len is None:
        rows = torch.randint(0, 60, (2, length), generator=g)
        forms.append(entry.qk_positions(length, length, rows, rows))
    for q_pos, k_pos in forms:

        def on(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        if entry.fixed_len is None and not entry.axes:
            _same(module.encode_input(x.to(device), on(q_pos)), cpu.encode_input(x, q_pos), device)
        _same(
            module.encode_qk(q.to(device), k.to(device), q_positions=on(q_pos), k_positions=on(k_pos)),
            cpu.encode_qk(q, k, q_positions=q_pos, k_positions=k_pos),
            device,
        )
        _same(
            module.attention_bias(q.to(device), k.to(device), q_positions=on(q_pos), k_positions=on(k_pos)),
            cpu.attention_bias(q, k, q_positions=q_pos, k_positions=k_pos),
            device,
        )
    if entry.fixed_len is not None:
        _same(module.encode_input(x.to(device)), cpu.encode_input(x), device)


def test_attention_on_device_matches_the_cpu(attention_entry: Entry, device: torch.device) -> None:
    entry = attention_entry
    cpu = entry.build()
    module = copy.deepcopy(cpu).to(device)
    causal = entry.sizes["causal"]
    length = entry.fixed_len or entry.grid_len or 9
    g = torch.Generator().manual_seed(1)
    q, k = make_qk(entry, 2, length, length, torch.float32, generator=g)
    v = torch.randn(q.shape, generator=g)
    keep = torch.ones(2, 1, 1, length, dtype=torch.bool)
    keep[0, ..., :2] = False
    q_pos, k_pos = entry.qk_positions(length, length, None, None)
    on = [None if t is None else t.to(device) for t in (q_pos, k_pos)]
    d_q, d_k, d_v = q.to(device), k.to(device), v.to(device)  # copies from the host: before _no_sync
    for mask in (None, keep):
        d_mask = None if mask is None else mask.to(device)
        with _no_sync(device):
            out = posenc.attention(
                d_q, d_k, d_v, module, causal=causal, attn_mask=d_mask, q_positions=on[0], k_positions=on[1]
            )
        ref = posenc.attention(
            q, k, v, cpu, causal=causal, attn_mask=mask, q_positions=q_pos, k_positions=k_pos
        )
        _same(out, ref, device)


LM_SPECS = [
    "rope",
    "alibi",
    "t5",
    "sinusoidal",
    "learned",
    "mrope",
    "transformer_xl",
    "xpos",
    "rope*1 + none",
]


@pytest.mark.parametrize("spec", LM_SPECS)
def test_transformer_lm_on_device(spec: str, device: torch.device) -> None:
    torch.manual_seed(0)
    cpu = TransformerLM(50, 32, 2, 4, position=spec, max_len=64).eval()
    model = copy.deepcopy(cpu).to(device)
    ids = torch.randint(0, 50, (2, 10))
    pad = torch.ones(2, 10, dtype=torch.bool)
    pad[0, :3] = False
    d_ids, d_pad = ids.to(device), pad.to(device)  # copies from the host (and back): outside _no_sync
    with torch.no_grad():
        full = cpu(ids)
        with _no_sync(device):
            outs = model(d_ids), model(d_ids, attention_mask=d_pad)
        _same(outs, (full, cpu(ids, attention_mask=pad)), device)
        for cache in (KVCache(), KVCache(capacity=12)):
            steps = [model(d_ids[:, :6], cache=cache)]
            with _no_sync(device):
                steps += [model(d_ids[:, i : i + 1], cache=cache) for i in range(6, 10)]
            _same(torch.cat(steps, dim=1), full, device)
    # training: the same gradients as on the CPU
    cpu.train()
    model.train()
    cpu(ids).logsumexp(-1).mean().backward()
    model(ids.to(device)).logsumexp(-1).mean().backward()
    for (name, a), b in zip(model.named_parameters(), cpu.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None, name
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="capturing a CUDA graph needs a CUDA GPU")
@pytest.mark.parametrize("spec", LM_SPECS)
def test_static_cache_decode_step_replays_as_a_cuda_graph(spec: str) -> None:
    """One decode step on a static cache, captured once in a CUDA graph and replayed for every next
    token, gives the full forward's logits (capture itself fails on any host sync)."""
    torch.manual_seed(0)
    model = TransformerLM(50, 32, 2, 4, position=spec, max_len=64).eval().cuda()
    ids = torch.randint(0, 50, (2, 12), device="cuda")
    with torch.no_grad():
        full = model(ids)
        cache = KVCache(capacity=16)
        model(ids[:, :6], cache=cache)
        token = ids[:, 6:7].clone()  # the graph's input: each replay reads the token copied here
        side = torch.cuda.Stream()  # warm up off the default stream, as torch.cuda.graph needs
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            steps = [model(token, cache=cache)]  # token 6, eager
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = model(token, cache=cache)  # recorded, not run: the cache still holds 7 tokens
        for i in range(7, 12):
            token.copy_(ids[:, i : i + 1])
            graph.replay()
            steps.append(logits.clone())
    torch.testing.assert_close(torch.cat(steps, dim=1), full[:, 6:], **TOL)


def test_device_fixture_lists_this_machine(device: torch.device) -> None:
    if device.type == "cuda":
        assert torch.cuda.is_available()
    assert torch.empty(1, device=device).device.type == device.type


def test_entries_cover_the_registry() -> None:
    """Every registered encoding has a row in the table (so the generic tests cover it), except
    those ``test_gpu_ready.BEYOND_TABLE`` covers by hand."""
    from test_gpu_ready import BEYOND_TABLE

    covered = {type(posenc.build(e.spec, **e.sizes)) for e in (*ENTRIES, *BEYOND_TABLE)}
    missing = sorted(n for n in posenc.available() if posenc.registry.lookup(n) not in covered)
    assert missing == [], f"registered encodings without a row in entries_table.ENTRIES: {missing}"
