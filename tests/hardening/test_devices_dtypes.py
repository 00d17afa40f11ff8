"""Devices and dtypes: caches are registered non-persistent buffers that follow ``.to(device)``,
stay float32 or better through ``.to(torch.bfloat16)`` / ``.half()`` and autocast, are not
rebuilt on every call, and come back exactly after meta-device construction."""

from __future__ import annotations

import pytest
import torch
from entries_table import FLOAT_DTYPES, Entry, drop_in_call, make_input, make_qk

import posenc
from posenc.functional import rope_inv_freq, rotary_reference, sinusoidal_table

WIDE = (torch.float32, torch.float64)

#: A float64 table (or rotation) against the float64 formula: the same float64 operations up to
#: ordering; positions up to 1e5 carry angle round-off ~1e5 * 1.1e-16.
F64_ATOL = 1e-10

HALF_CASTS = {
    "to(bfloat16)": lambda m: m.to(torch.bfloat16),
    "half()": lambda m: m.half(),
    "bfloat16()": lambda m: m.bfloat16(),
    "to(cpu, float16)": lambda m: m.to("cpu", torch.float16),
}

ACCELERATORS = [
    d
    for d, ok in (
        ("cuda", torch.cuda.is_available()),
        ("mps", getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()),
    )
    if ok
]


def _float_buffers(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: b for n, b in module.named_buffers() if b.is_floating_point()}


def _hook_outputs(
    module: posenc.PositionalEncoding, entry: Entry, dtype: torch.dtype, length: int = 40, device: str = "cpu"
):
    """Every hook's output on fixed random inputs (positions past the initial tables included)."""
    torch.manual_seed(0)
    x = make_input(entry, 2, length, dtype).to(device)
    q, k = (t.to(device) for t in make_qk(entry, 2, length, length, dtype))
    positions = None
    if entry.fixed_len is None:
        top = entry.max_position or entry.position_limit or 20_000
        positions = torch.linspace(0, top - 1, steps=length).long().to(device)
    q_pos, k_pos = entry.qk_positions(length, length, positions, positions)  # on axes
    outs = [
        module.encode_input(x, positions),
        *module.encode_qk(q, k, q_positions=q_pos, k_positions=k_pos),
    ]
    bias = module.attention_bias(q, k, q_positions=positions, k_positions=positions)
    return [t for t in (*outs, bias) if t is not None]


# --- where caches live ---------------------------------------------------------------------------------------


def test_caches_are_registered_non_persistent_buffers(entry: Entry) -> None:
    module = entry.build()
    # nothing tensor-valued hides in a plain attribute (it would not follow .to() or be seen by hooks)
    stray = [n for n, v in vars(module).items() if isinstance(v, torch.Tensor)]
    assert not stray, f"tensors kept outside parameters/buffers: {stray}"
    # every buffer is non-persistent: state_dict holds exactly the learned parameters
    assert set(module.state_dict()) == {n for n, _ in module.named_parameters()}
    for name, buffer in module.named_buffers():
        if buffer.is_floating_point():
            assert buffer.dtype in WIDE, f"{name} is {buffer.dtype}"


def test_moves_and_casts_keep_the_buffers_in_order(entry: Entry) -> None:
    """``.to()``, ``.double()`` and ``to_empty()`` after building on the meta device leave ``named_buffers()`` in
    the order the module registered them (RoPE's cos/sin table came last after any move: code that pairs two
    models' buffers by position, as tests/test_distributed.py's FSDP2 test does, compared the wrong ones)."""
    built = entry.build()
    order = [name for name, _ in built.named_buffers(remove_duplicate=False)]
    with torch.device("meta"):
        on_meta = entry.build()
    for moved in (built.to("meta"), entry.build().double(), on_meta.to_empty(device="cpu")):
        # (remove_duplicate=False: after .double() RoPE's inv_freq is its float64 frequencies, one tensor)
        assert [name for name, _ in moved.named_buffers(remove_duplicate=False)] == order


def test_to_meta_moves_every_tensor(entry: Entry) -> None:
    module = entry.build().to("meta")
    for name, t in (*module.named_parameters(), *module.named_buffers()):
        assert t.device.type == "meta", f"{name} stayed on {t.device}"
    # and the module runs on meta inputs (shape propagation), giving meta outputs
    outputs = drop_in_call(module, entry, 2, entry.fixed_len or 9, torch.float32, device="meta")
    for out in outputs:
        assert out.device.type == "meta"


def test_meta_forward_with_explicit_positions(entry: Entry) -> None:
    """Shape propagation on the meta device (e.g. to size a model before materialising it)."""
    module = entry.build().to("meta")
    length = entry.fixed_len or 9
    positions = torch.arange(length, device="meta")
    x = make_input(entry, 2, length, torch.float32).to("meta")
    q, k = (t.to("meta") for t in make_qk(entry, 2, length, length, torch.float32))
    qk_pos = entry.positions(positions)  # on axes
    outs = [
        module.encode_input(x, positions),
        *module.encode_qk(q, k, q_positions=qk_pos, k_positions=qk_pos),
    ]
    bias = module.attention_bias(q, k, q_positions=positions, k_positions=positions)
    for out in (*outs, *(() if bias is None else (bias,))):
        assert out.device.type == "meta"
    assert outs[0].shape == x.shape and outs[1].shape == q.shape


@pytest.mark.skipif(not ACCELERATORS, reason="no accelerator on this machine")
@pytest.mark.parametrize("device", ACCELERATORS)
def test_to_accelerator_moves_caches_and_matches_cpu(entry: Entry, device: str) -> None:
    module = entry.build()
    expected = _hook_outputs(module, entry, torch.float32)
    module.to(device)
    for name, t in (*module.named_parameters(), *module.named_buffers()):
        assert t.device.type == device, f"{name} stayed on {t.device}"
    got = _hook_outputs(module, entry, torch.float32, device=device)
    for e, g in zip(expected, got, strict=True):
        # accelerator sin/cos/matmul round differently from the CPU's: float32 round-off
        torch.testing.assert_close(g.cpu(), e, rtol=1e-5, atol=1e-5)


# --- dtype casts ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cast", list(HALF_CASTS), ids=list(HALF_CASTS))
def test_half_precision_casts_do_not_downcast_caches(cached_entry: Entry, cast: str) -> None:
    module = cached_entry.build()
    expected = None if cached_entry.has_params else _hook_outputs(module, cached_entry, torch.bfloat16)
    before = {n: b.clone() for n, b in _float_buffers(module).items()}
    HALF_CASTS[cast](module)
    after = _float_buffers(module)
    assert set(after) == set(before)
    for name, buffer in after.items():
        assert buffer.dtype in WIDE, f"{cast} turned {name} into {buffer.dtype}"
        torch.testing.assert_close(buffer, before[name], rtol=0, atol=0)
    if expected is not None:
        # the cast changes nothing in what the encoding computes for half-precision inputs
        got = _hook_outputs(module, cached_entry, torch.bfloat16)
        for e, g in zip(expected, got, strict=True):
            assert g.dtype == e.dtype
            torch.testing.assert_close(g, e, rtol=0, atol=0)


@pytest.mark.parametrize("default", [torch.bfloat16, torch.float16, torch.float64], ids=str)
def test_caches_are_float32_whatever_the_default_dtype(cached_entry: Entry, default: torch.dtype) -> None:
    """Built under ``torch.set_default_dtype`` (a model built in bfloat16 by setting the default dtype), the caches
    are a float32 build's (float64 where always float64): RoPE's and xPos's cos/sin table and ``inv_freq`` were
    built in the default dtype, and float32 queries then rotated with bfloat16 rows."""
    expected = _float_buffers(cached_entry.build())
    previous = torch.get_default_dtype()
    torch.set_default_dtype(default)
    try:
        built = _float_buffers(cached_entry.build())
    finally:
        torch.set_default_dtype(previous)
    assert built.keys() == expected.keys()
    for name, buffer in built.items():
        assert buffer.dtype == expected[name].dtype, f"{name} is {buffer.dtype}, not {expected[name].dtype}"
        torch.testing.assert_close(buffer, expected[name], rtol=0, atol=0)


def test_double_makes_every_float_cache_float64(cached_entry: Entry) -> None:
    """``.double()`` leaves no float cache in float32 (ALiBi's slopes stayed float32, against docs/guarantees.md)."""
    for name, buffer in _float_buffers(cached_entry.build().double()).items():
        assert buffer.dtype == torch.float64, f"{name} is {buffer.dtype} after .double()"


def test_double_gives_float64_accurate_tables() -> None:
    """``.double()`` recomputes RoPE's and the sinusoid's tables in float64 (not widened float32)."""
    positions = torch.tensor([0, 1, 4095, 65_537, 100_000])
    rope = posenc.RoPE(16).double()
    assert all(b.dtype == torch.float64 for b in _float_buffers(rope).values())
    x = torch.randn(1, 1, positions.numel(), 16, dtype=torch.float64)
    angles = positions.double()[:, None] * rope_inv_freq(16, dtype=torch.float64)
    expected = rotary_reference(x, angles.cos(), angles.sin(), "half")
    torch.testing.assert_close(rope.rotate(x, positions), expected, rtol=0, atol=F64_ATOL)

    pe = posenc.Sinusoidal(16).double()
    assert all(b.dtype == torch.float64 for b in _float_buffers(pe).values())
    rows = pe.table(positions)
    assert rows.dtype == torch.float64
    torch.testing.assert_close(
        rows, sinusoidal_table(positions, 16, dtype=torch.float64), rtol=0, atol=F64_ATOL
    )


def test_autocast_changes_nothing_in_the_encodings(entry: Entry) -> None:
    module = entry.build()
    outside = _hook_outputs(module, entry, torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = _hook_outputs(module, entry, torch.float32)
    for o, i in zip(outside, inside, strict=True):
        assert i.dtype == o.dtype
        torch.testing.assert_close(i, o, rtol=0, atol=0)


def test_autocast_changes_nothing_in_the_functional_angles() -> None:
    positions = torch.arange(0, 131_073, 4097)
    inv_freq = rope_inv_freq(64, dtype=torch.float32)
    outside = posenc.functional.rope_cos_sin(positions, inv_freq)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = posenc.functional.rope_cos_sin(positions, inv_freq)
    for o, i in zip(outside, inside, strict=True):
        torch.testing.assert_close(i, o, rtol=0, atol=0)


@pytest.mark.parametrize("backend", ["auto", "chunked"])
def test_autocast_changes_nothing_in_attention_but_the_dtype(entry: Entry, backend: str) -> None:
    # Autocast reached SDPA and the value term's matmuls inside posenc.attention: a float32 bias was
    # rounded to bfloat16 (T5: 3.7e-2 off against 7.8e-3), Shaw's scores too, the Toeplitz view copied whole.
    module = entry.build()
    length = entry.fixed_len or entry.grid_len or 12
    g = torch.Generator().manual_seed(0)
    q, k = make_qk(entry, 2, length, length, torch.bfloat16, generator=g)
    v = torch.randn(q.shape, generator=g).bfloat16()
    with torch.no_grad():
        for p in module.parameters():  # biases of a few units, far from bfloat16's steps
            p.copy_(torch.randn(p.shape, generator=g) * 3)
    kwargs = {
        "causal": entry.sizes["causal"],
        "backend": backend,
        "chunk_size": 5 if backend == "chunked" else None,
    }
    outside = posenc.attention(q, k, v, module, **kwargs)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = posenc.attention(q, k, v, module, **kwargs)
        widened = posenc.attention(q.float(), k.float(), v.float(), module, **kwargs)
    torch.testing.assert_close(inside, outside, rtol=0, atol=0)
    assert widened.dtype == torch.bfloat16  # as SDPA's under autocast
    if module.kind != "rotary":  # (a rotation of float32 inputs is rounded once, after it: not bf16's)
        torch.testing.assert_close(widened, outside, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_outputs_keep_the_input_dtype(entry: Entry, dtype: torch.dtype) -> None:
    module = entry.build()
    for out in drop_in_call(module, entry, 2, entry.fixed_len or 33, dtype):
        assert out.dtype == dtype
    for out in _hook_outputs(module, entry, dtype):
        wide = torch.float64 if dtype == torch.float64 else torch.float32
        # biases are float32 (float64 for float64 inputs), never half; everything else is dtype
        assert out.dtype == dtype or (out.dim() == 4 and out.dtype == wide and "bias" in entry.hooks)


# --- caches are built once ---------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [20, 3000], ids=["within", "grown"])
def test_second_call_builds_no_new_table(cached_entry: Entry, length: int) -> None:
    module = cached_entry.build()
    if cached_entry.fixed_len is not None:
        length = cached_entry.fixed_len
    elif "bias" in cached_entry.hooks:
        length = min(length, 300)  # bias caches do not grow with length; keep (b, h, t, t) small
    drop_in_call(module, cached_entry, 2, length, torch.float32)
    _hook_outputs(module, cached_entry, torch.float32)  # explicit positions, up to 20000
    first = {n: (b.data_ptr(), b.shape) for n, b in _float_buffers(module).items()}
    builds = getattr(module, "table_builds", None)
    drop_in_call(module, cached_entry, 2, length, torch.float32)
    drop_in_call(module, cached_entry, 1, max(1, length // 2), torch.bfloat16)  # shorter, other dtype
    _hook_outputs(module, cached_entry, torch.float32)
    second = {n: (b.data_ptr(), b.shape) for n, b in _float_buffers(module).items()}
    assert second == first, "a cache was rebuilt on a call it already covered"
    if builds is not None:
        assert module.table_builds == builds


# --- meta-device construction ----------------------------------------------------------------------------


def test_meta_construction_then_to_empty_and_reset_caches(entry: Entry) -> None:
    """The documented re-initialisation: ``to_empty()``, ``reset_caches()`` (and
    ``reset_parameters()`` for learned tables) gives the tables of a normal construction."""
    reference = entry.build()
    with torch.device("meta"):
        module = entry.build()
    assert all(t.device.type == "meta" for t in (*module.parameters(), *module.buffers()))
    module.to_empty(device="cpu")
    module.reset_caches()
    for name, buffer in reference.named_buffers():
        got = dict(module.named_buffers())[name]
        assert got.device.type == "cpu" and got.dtype == buffer.dtype
        torch.testing.assert_close(got, buffer, rtol=0, atol=0)
    if entry.has_params:
        module.reset_parameters()  # fresh random values: check they are finite and usable
        module.load_state_dict(reference.state_dict())
    for e, g in zip(
        _hook_outputs(reference, entry, torch.float32),
        _hook_outputs(module, entry, torch.float32),
        strict=True,
    ):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_a_double_alibi_gives_float32_bias_to_float32_queries():
    """After .double() ALiBi's float64 slopes gave a float64 bias to float32 queries (the hook's contract:
    float32), and posenc.attention's chunked and auto paths then raised a torch dtype error."""
    q = k = v = torch.randn(1, 4, 16, 8)
    alibi = posenc.ALiBi(4).double()
    assert torch.equal(alibi.attention_bias(q, k), posenc.ALiBi(4).attention_bias(q, k))
    for backend in ("auto", "chunked", "sdpa"):
        assert posenc.attention(q, k, v, alibi, causal=True, backend=backend).dtype == torch.float32


def test_t5_built_on_meta_and_loaded_with_assign_reads_its_own_buckets():
    """load_state_dict(assign=True) into a T5 built on meta left its bucket cache there, and the embedding
    looked meta indices up in a CPU table: stray memory as the bias (0.04 to 1e11 off), no error."""
    torch.manual_seed(0)
    built = posenc.build("t5", num_heads=4, causal=True)
    with torch.device("meta"):
        loaded = posenc.build("t5", num_heads=4, causal=True)
    loaded.load_state_dict(built.state_dict(), assign=True)
    q = k = torch.randn(1, 4, 6, 8)
    assert torch.equal(loaded.attention_bias(q, k), built.attention_bias(q, k))
