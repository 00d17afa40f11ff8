"""Issue 12's classes of misuse in the core (each class, not one example): refused inputs name
the argument, the value and what is expected, never an error from inside torch or Python."""

from __future__ import annotations

import math

import pytest
import torch

import posenc
import posenc.functional as F
from posenc._checks import MAX_HEADS, allocate, short
from posenc.nn import KVCache

FLOAT8 = [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)]
UNSIGNED = [getattr(torch, n) for n in ("uint8", "uint16", "uint32", "uint64") if hasattr(torch, n)]


def _qk(dtype: torch.dtype = torch.float32, t: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, 4, t, 8, generator=g).to(dtype), torch.randn(2, 4, t, 8, generator=g).to(dtype)


ENCODINGS = ["rope", "alibi", "t5", "sinusoidal", "learned", "none"]


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
@pytest.mark.parametrize("name", [n for n in ENCODINGS if n != "none"])  # NoPE reads nothing
def test_float8_inputs_are_refused_by_name(name: str, dtype: torch.dtype) -> None:
    module = posenc.build(name, d_model=32, num_heads=4, head_dim=8, max_len=16)
    q, k = _qk()
    with pytest.raises(TypeError, match=r"float8.*bfloat16"):
        if module.kind == "additive":
            module.encode_input(torch.randn(2, 5, 32).to(dtype))
        elif module.kind == "bias":
            module.attention_bias(q.to(dtype), k.to(dtype))
        else:
            module.encode_qk(q.to(dtype), k.to(dtype))


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
@pytest.mark.parametrize("name", ["rope", "alibi", "t5"])
def test_unsigned_positions_equal_long_positions(name: str, dtype: torch.dtype) -> None:
    module = posenc.build(name, num_heads=4, head_dim=8)
    q, k = _qk()
    positions = torch.tensor([3, 1, 4, 1, 5])
    ref = posenc.attention(q, k, k, module, causal=True, q_positions=positions, k_positions=positions)
    got = posenc.attention(
        q, k, k, module, causal=True, q_positions=positions.to(dtype), k_positions=positions.to(dtype)
    )
    torch.testing.assert_close(got, ref, rtol=0, atol=0)


def test_uint64_past_int64_is_refused() -> None:
    huge = torch.tensor([0, 2**63 + 5], dtype=torch.uint64) if hasattr(torch, "uint64") else None
    if huge is None:
        pytest.skip("no torch.uint64")
    q, k = _qk(t=2)
    with pytest.raises(ValueError, match="positions must be non-negative"):
        posenc.RoPE(8).encode_qk(q, k, q_positions=huge, k_positions=huge)


@pytest.mark.parametrize("name", ["rope", "alibi", "t5"])
@pytest.mark.parametrize("which", ["q_positions", "k_positions"])
def test_positions_on_another_device_are_refused(name: str, which: str) -> None:
    module = posenc.build(name, num_heads=4, head_dim=8)
    q, k = _qk()
    hook = module.encode_qk if module.kind == "rotary" else module.attention_bias
    with pytest.raises(ValueError, match=rf"{which} is on meta, but the tensors it positions are on cpu"):
        hook(q, k, **{which: torch.arange(5, device="meta")})


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"name": "learned", "max_len": 10**400}, "max_len=an int of 401 digits"),
        ({"name": "learned", "max_len": 10**13}, "larger than this machine's memory"),
        ({"name": "alibi", "num_heads": 10**400}, f"num_heads must be at most {MAX_HEADS}"),
        ({"name": "alibi", "num_heads": 10**15}, f"num_heads must be at most {MAX_HEADS}"),
        ({"name": "t5", "num_heads": 10**9}, f"num_heads must be at most {MAX_HEADS}"),
        ({"name": "t5", "max_distance": 10**12}, "max_distance must be at most"),
        ({"name": "t5", "num_buckets": 10**12}, "num_buckets must be at most"),
        ({"name": "rope", "base": 10**400}, "too large for a float"),
    ],
    ids=lambda v: str(v)[:40] if isinstance(v, dict) else "",
)
def test_sizes_past_any_machine_are_a_clear_error(spec: dict, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        posenc.build(spec, d_model=8, num_heads=4, head_dim=8)
    assert fragment in str(info.value)
    assert len(str(info.value)) < 400  # never the value echoed whole


def test_learned_resize_past_memory_is_refused_before_allocating() -> None:
    table = posenc.Learned(8, 4)
    with pytest.raises(ValueError, match=r"new_max_len=10000000000000 .*larger than this machine's memory"):
        table.resize(10**13)
    assert table.max_len == 4 and table.weight.shape == (4, 8)


def test_short_never_echoes_a_huge_value() -> None:
    assert short(10**5000) == "an int of more than 4000 digits"  # str() of it would raise
    assert short(10**200) == "an int of 201 digits"
    assert len(short("x" * 10_000_000)) < 100
    with pytest.raises(ValueError, match="over 2\\*\\*62 elements"):
        allocate("n=huge", (2**40, 2**40))


def test_huge_spec_string_is_not_echoed_whole() -> None:
    with pytest.raises(ValueError) as info:
        posenc.build("x" * 10_000_000)
    assert len(str(info.value)) < 1000


def test_causal_alibi_in_bidirectional_attention_is_refused() -> None:
    """ALiBi(causal=True)'s key-only bias is exact only under a causal mask: a silently wrong
    result in bidirectional attention becomes an error that says what to build instead."""
    q, k = _qk()
    with pytest.raises(ValueError, match=r"causal=False.*ALiBi.*causal=False"):
        posenc.attention(q, k, k, posenc.ALiBi(4), causal=False)
    bidirectional = posenc.attention(q, k, k, posenc.ALiBi(4, causal=False), causal=False)
    assert torch.isfinite(bidirectional).all()


def test_a_prepared_state_refuses_positions_and_other_lengths() -> None:
    """A PositionState's positions were fixed by prepare(): positions given again, or q/k of other lengths,
    would rotate (or bias) by the wrong positions; each is an error that says what to do instead."""
    q, k = _qk()
    state = posenc.RoPE(8).prepare(5)
    with pytest.raises(ValueError, match=r"q_positions/k_positions cannot be given with a PositionState"):
        posenc.attention(q, k, k, state, q_positions=torch.arange(5))
    with pytest.raises(ValueError, match=r"prepared for 5 queries and 5 keys, but q has 4 and k has 4"):
        posenc.attention(q[:, :, :4], k[:, :, :4], k[:, :, :4], state)
    with pytest.raises(TypeError, match=r"attn_mask must be a boolean torch.Tensor .* got list"):
        posenc.attention(q, k, k, posenc.ALiBi(4), attn_mask=[[True]])


@pytest.mark.parametrize(
    "encoding",
    [posenc.RelativeBias(4), posenc.ALiBi(4, causal=False), posenc.KERPLE(4), posenc.ShawRelative(8, 4)],
    ids=["t5", "alibi", "kerple", "shaw"],
)
def test_a_prepared_bias_state_refuses_other_lengths_and_batches(encoding: posenc.PositionalEncoding) -> None:
    """A bias state's hooks called directly with q and k of other lengths, or another batch than its ``(b, t)``
    positions', returned a bias of the prepared shape without an error."""
    q, k = _qk()
    state = encoding.prepare(5)
    hooks = [state.attention_bias] + (
        [state.score_mod] if not isinstance(encoding, posenc.ShawRelative) else []
    )
    for hook in hooks:
        with pytest.raises(
            ValueError, match=r"got 4 queries and 4 keys, but .* prepared for 5 queries and 5 keys"
        ):
            hook(q[:, :, :4], k[:, :, :4])
    batched = encoding.prepare(5, q_positions=torch.arange(10).view(2, 5) % 5)
    with pytest.raises(ValueError, match=r"got a batch of 3, but .* prepared for positions of batch 2"):
        batched.attention_bias(torch.cat((q, q[:1])), torch.cat((k, k[:1])))
    assert batched.attention_bias(q, k).shape[0] == 2


_DYNAMIC = {"rope_type": "dynamic", "factor": 2.0}
_ONES = torch.ones(1, 2, 3, 4)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: posenc.RoPE(8).prepare(-1), ValueError, r"q_len must be >= 0, got -1"),
        (lambda: posenc.ALiBi(4).prepare(2.5), TypeError, r"q_len must be an int, got 2.5"),
        (lambda: posenc.RelativeBias(4).prepare(5, 3.0), TypeError, r"k_len must be an int"),
        (lambda: posenc.RoPE(8).prepare(5, batch=-1), ValueError, r"batch must be >= 0, got -1"),
        (
            lambda: posenc.RoPE(8, scaling=_DYNAMIC, max_len=16).prepare(40, seq_len=-1),
            ValueError,
            r"seq_len must be >= 1, got -1",
        ),
        (
            lambda: posenc.RoPE(8, scaling=_DYNAMIC, max_len=16).prepare(4, seq_len=torch.tensor(0)),
            ValueError,
            r"seq_len must be >= 1, got 0",
        ),
        (
            lambda: posenc.RoPE(8, scaling=_DYNAMIC, max_len=16).prepare(4, seq_len=2.5),
            TypeError,
            r"seq_len must be an int",
        ),
        (
            lambda: KVCache().update(0, _ONES, torch.ones(1, 2, 4, 4), torch.arange(5)),
            ValueError,
            r"must agree in batch, heads and tokens",
        ),
        (
            lambda: KVCache().update(0, _ONES.long(), _ONES, torch.arange(3)),
            TypeError,
            r"k must be a floating-point tensor",
        ),
        (
            lambda: KVCache().update(0, _ONES[0], _ONES[0], torch.arange(3)),
            ValueError,
            r"k must have shape \(batch, kv_heads, t, head_dim\)",
        ),
        (
            lambda: posenc.nn.TransformerLM(11, 16, 1, 2, bias="yes"),
            TypeError,
            r"bias must be a bool, got 'yes'",
        ),
        (
            lambda: posenc.nn.TransformerLM(11, 16, 1, 2, mlp_ratio=math.nan),
            ValueError,
            r"mlp_ratio must be a finite number > 0, got nan",
        ),
        (
            lambda: posenc.nn.describe_encoding("rope"),
            TypeError,
            r"encoding must be a posenc.PositionalEncoding, got str",
        ),
        (
            lambda: posenc.nn.TransformerBlock(16, 2, norm_eps=-1.0),
            ValueError,
            r"norm_eps must be a finite number > 0, got -1.0",
        ),
    ],
    ids=[
        "q_len",
        "q_len-float",
        "k_len",
        "batch",
        "seq_len",
        "seq_len-tensor",
        "seq_len-float",
        "cache-lengths",
        "cache-dtype",
        "cache-rank",
        "model-bias",
        "model-mlp_ratio",
        "describe_encoding",
        "block-norm_eps",
    ],
)
def test_lengths_cache_entries_and_model_options_are_checked(call, error, match) -> None:
    """Each was accepted (a negative or fractional length, a cache of 3 keys, 4 values and 5 positions, a dynamic
    rotation at seq_len=-1 off by up to 2) or failed inside torch or Python without naming the argument."""
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: F.rope_inv_freq(7), r"dim must be even .*got 7"),
        (lambda: F.rope_inv_freq(8, -1.0), r"base must be a finite number > 0, got -1.0"),
        (lambda: F.mrope_axes((1, -1, 2)), r"mrope_section\[1\] must be >= 0, got -1"),
        (lambda: F.axial_frequencies((3, 4)), r"axes_dim\[0\] must be even"),
        (
            lambda: F.rotary_reference(*_qk()[:1], torch.ones(5, 4), torch.ones(5, 4), "split"),
            r"layout must be",
        ),
    ],
    ids=["rope_inv_freq-odd", "rope_inv_freq-base", "mrope_axes", "axial_frequencies", "rotary_reference"],
)
def test_functional_options_are_checked(call, match) -> None:
    """Each returned a result: 4 frequencies for 7 channels, NaN ones, an axis list with a negative section, an
    odd axis width, the interleaved rotation for an unknown layout."""
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: posenc.AxialRoPE(7), ValueError, r"head_dim must be even .* got 7"),
        (
            lambda: posenc.AxialRoPE(8, axes_dim=(4,), num_axes=2),
            ValueError,
            r"num_axes=2 conflicts with axes_dim=\(4,\)",
        ),
        (lambda: posenc.AxialRoPE(8).grid_positions(), ValueError, r"grid_positions\(\) needs a grid"),
    ],
    ids=["odd-head-dim", "num-axes", "no-grid"],
)
def test_axial_rope_misuse_names_the_argument(build, error, match) -> None:
    with pytest.raises(error, match=match):
        build()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rope", "learned"])
def test_negative_positions_fail_under_compile_instead_of_wrapping(name: str) -> None:
    module = posenc.build(name, d_model=32, head_dim=8, max_len=16)
    q, k = _qk()
    x = torch.randn(2, 5, 32)
    if module.kind == "rotary":

        def fn(positions: torch.Tensor) -> torch.Tensor:
            return module.encode_qk(q, k, q_positions=positions, k_positions=positions)[0]
    else:

        def fn(positions: torch.Tensor) -> torch.Tensor:
            return module.encode_input(x, positions)

    compiled = torch.compile(fn, fullgraph=True, backend="inductor")
    torch.testing.assert_close(compiled(torch.arange(5)), fn(torch.arange(5)))
    with pytest.raises(RuntimeError, match="non-negative"):
        compiled(torch.tensor([0, 1, -1, 2, 3]))
    if name == "learned":
        with pytest.raises(RuntimeError, match="beyond the learned table"):
            compiled(torch.tensor([0, 1, 99, 2, 3]))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: F.alibi_slopes(4, dtype=torch.long),
            TypeError,
            r"dtype must be a floating-point dtype, got torch.int64",
        ),
        (
            lambda: F.clipped_distance_index(torch.arange(3), torch.arange(3), left=-3, right=2),
            ValueError,
            r"the distances -left .. right must not be empty, got left=-3, right=2",
        ),
        (
            lambda: F.relative_position_bucket(torch.tensor([0.5, -1.5])),
            TypeError,
            r"relative_position must have an integer dtype",
        ),
        (
            lambda: F.mrope_axes([2, 1, 1], interleaved="false"),
            ValueError,
            r"interleaved must be False, True or 'hw', got 'false'",
        ),
        (
            lambda: F.mrope_axes([4], interleaved="hw"),
            ValueError,
            r"interleaved='hw' needs two or three sections",
        ),
        (
            lambda: F.mrope_axes([2, 2], interleaved=True),
            ValueError,
            r"interleaved=True needs three sections",
        ),
        (
            lambda: F.apply_rotary(torch.ones(1, 2, 5, 8), torch.ones(4, 4), torch.ones(4, 4)),
            ValueError,
            r"cos/sin of shape \(4, 4\) do not broadcast against x's rows \(1, 2, 5\)",
        ),
    ],
    ids=[
        "alibi_slopes-dtype",
        "clipped_distance_index-left",
        "relative_position_bucket-float",
        "mrope_axes-str",
        "mrope_axes-hw",
        "mrope_axes-interleaved",
        "apply_rotary-rows",
    ],
)
def test_more_functional_options_are_checked(call, error, match) -> None:
    """Each returned a meaningless result: integer slopes of 0, every distance in row 0, float distances
    truncated, any truthy string read as interleaved, a single section alternating into axis -1; angles for
    another number of tokens were a raw broadcast error inside the rotation."""
    with pytest.raises(error, match=match):
        call()


def test_a_value_term_of_another_width_than_v_is_refused() -> None:
    """``ShawRelative(8, values=True)`` with values 16 wide: a raw broadcast error at the sum."""
    q = k = torch.ones(1, 2, 3, 8)
    with pytest.raises(
        ValueError, match=r"v has head width 16, but ShawRelative's value term adds vectors of width 8"
    ):
        posenc.attention(q, k, torch.ones(1, 2, 3, 16), posenc.ShawRelative(8, values=True))


@pytest.mark.parametrize("cls", [posenc.Learned2D, posenc.Sinusoidal2D])
def test_positions_of_a_grid_with_a_class_token_are_counted_without_it(cls) -> None:
    """The message said "expected 16 (the sequence length)" of a sequence of 17 tokens."""
    encoding = cls(16, (4, 4), num_prefix_tokens=1)
    with pytest.raises(
        ValueError,
        match=r"positions has length 17, expected 16 \(one per patch token: x's 17 tokens less num_prefix_tokens=1\)",
    ):
        encoding(torch.randn(1, 17, 16), torch.arange(17))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda layer, model: layer(torch.ones(1, 2, 8), cache={}),
            TypeError,
            r"cache must be a posenc.nn.KVCache or None, got dict",
        ),
        (
            lambda layer, model: layer(torch.ones(1, 2, 8, dtype=torch.long)),
            TypeError,
            r"x must be a floating-point tensor, got dtype torch.int64",
        ),
        (
            lambda layer, model: layer([[1.0]]),
            TypeError,
            r"x must be a torch.Tensor of shape \(batch, seq, d_model=8\), got list",
        ),
        (
            lambda layer, model: model.generate(
                torch.zeros(1, 2, dtype=torch.long), 1, do_sample=True, generator=5
            ),
            TypeError,
            r"generator must be a torch.Generator or None, got int",
        ),
    ],
    ids=["layer-cache-dict", "layer-int-x", "layer-list-x", "generate-generator"],
)
def test_layer_and_generate_inputs_are_checked(call, error, match) -> None:
    """Each failed inside Python or torch (an AttributeError, torch's dtype or multinomial error) or raised
    a ValueError for a value of the wrong type."""
    layer = posenc.nn.MultiheadAttention(8, 2, "rope", causal=True)
    model = posenc.nn.TransformerLM(11, 8, 1, 2)
    with pytest.raises(error, match=match):
        call(layer, model)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"mode": "cubic"}, ValueError, r"mode must be one of \['bicubic', .*got 'cubic'"),
        (
            {"interpolate_offset": math.nan},
            ValueError,
            r"interpolate_offset must be a finite number > 0, got nan",
        ),
        ({"align_corners": "y"}, TypeError, r"align_corners must be a bool or None, got 'y'"),
        (
            {"old_grid": (2, 2, 4)},
            ValueError,
            r"old_grid must be a tuple of 2 ints \(one per axis\), got \(2, 2, 4\)",
        ),
    ],
    ids=["mode", "interpolate_offset", "align_corners", "grid-axes"],
)
def test_resample_grid_table_options_are_checked(options, error, match) -> None:
    """Each failed inside torch (NotImplementedError, an int64 overflow, upsample's TypeError) or Python."""
    call = {"old_grid": (4, 4), "new_grid": (5, 5), **options}
    with pytest.raises(error, match=match):
        F.resample_grid_table(torch.randn(16, 8), **call)


def test_describe_and_shard_batch_name_a_wrong_type() -> None:
    """``describe(5)`` and ``describe(dict)`` were AttributeErrors; ``shard_batch(seq_dims=1.0)`` "'float' object
    is not iterable"."""
    for name in (5, dict):
        with pytest.raises(
            TypeError, match=r"name must be a registered name or a PositionalEncoding subclass"
        ):
            posenc.describe(name)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=r"seq_dims must be an int or a list of ints \(one per tensor\), got 1.0"
    ):
        posenc.distributed.shard_batch([torch.zeros(1, 8)], seq_dims=1.0, world_size=2, rank=0)  # type: ignore[arg-type]


def test_m_rope_positions_with_the_axes_first_point_to_the_axes_last_form() -> None:
    """transformers' ``(3, t)`` M-RoPE ids said "batch size 3, expected 2 or 1" (read as three rows of text)."""
    mrope = posenc.MRoPE(16, mrope_section=[2, 3, 3])
    q = torch.randn(2, 2, 5, 16)
    ids = torch.zeros(3, 5, dtype=torch.long)
    with pytest.raises(
        ValueError, match=r"q_positions has shape \(3, 5\): .*it is q_positions.mT here \(seq, 3\)"
    ):
        mrope.encode_qk(q, q, q_positions=ids, k_positions=ids)
