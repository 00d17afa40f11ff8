"""The contract on every device of this machine (the ``device`` fixture of ``conftest.py``).

On the CPU these run the CPU; on a GPU machine they also run ``cuda`` with no edits: every hook
and ``posenc.attention`` on the device agree with the CPU, the outputs and caches stay on the
device, and a ``TransformerLM`` decodes (growing and static caches) to its full forward, trains
to the CPU's gradients, and on CUDA runs forward and decode with
``torch.cuda.set_sync_debug_mode("error")``: a host sync fails the test.
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
    for mask in (None, keep):
        with _no_sync(device):
            out = posenc.attention(
                q.to(device),
                k.to(device),
                v.to(device),
                module,
                causal=causal,
                attn_mask=None if mask is None else mask.to(device),
                q_positions=on[0],
                k_positions=on[1],
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
    with torch.no_grad():
        full = cpu(ids)
        with _no_sync(device):
            _same(model(ids.to(device)), full, device)
            _same(model(ids.to(device), attention_mask=pad.to(device)), cpu(ids, attention_mask=pad), device)
        for cache in (KVCache(), KVCache(capacity=12)):
            d_ids = ids.to(device)
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
