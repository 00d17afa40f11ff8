"""Bad input, everywhere: each case raises ValueError or TypeError, early, with a message that
names the argument, the value received and what is accepted. Zero-length sequences are not an
error: every hook returns a correctly shaped empty result (decided here, tested for all)."""

from __future__ import annotations

import ast
import math
import pathlib
import warnings
from collections.abc import Callable

import pytest
import torch
from entries_table import Entry, drop_in_call, make_input, make_qk

import posenc
from posenc.functional import resolve_rope_scaling
from posenc.nn import TransformerLM

PACKAGE = pathlib.Path(posenc.__file__).parent


def _q(b=2, h=4, t=5, d=8, dtype=torch.float32):
    return torch.randn(b, h, t, d, dtype=dtype)


def _rope(**kw):
    return posenc.RoPE(8, **kw)


def _t5():
    return posenc.RelativeBias(4)


def _alibi():
    return posenc.ALiBi(4)


# (id, the call, the exception type, substrings the message must contain: the argument's name,
#  the value received, and what is accepted)
CASES: list[tuple[str, Callable[[], object], type[Exception], tuple[str, ...]]] = [
    # --- ranks, shapes, dtypes of q / k / x / scores
    (
        "rope q rank 3",
        lambda: _rope()(torch.randn(4, 5, 8), torch.randn(4, 5, 8)),
        ValueError,
        ("q", "rank 3", "(batch, heads, seq, head_dim)"),
    ),
    ("rope k rank 5", lambda: _rope()(_q(), torch.randn(1, 2, 4, 5, 8)), ValueError, ("k", "rank 5")),
    ("rope head_dim q vs k", lambda: _rope()(_q(), _q(d=6)), ValueError, ("head_dim", "8", "6")),
    (
        "rope head_dim vs module",
        lambda: _rope()(_q(d=6), _q(d=6)),
        ValueError,
        ("head_dim", "6", "head_dim=8"),
    ),
    (
        "rope heads not a multiple",
        lambda: _rope()(_q(h=4), _q(h=3)),
        ValueError,
        ("heads", "4", "3", "multiple"),
    ),
    ("rope batch mismatch", lambda: _rope()(_q(b=2), _q(b=3)), ValueError, ("batch", "2", "3")),
    (
        "rope integer q",
        lambda: _rope()(torch.ones(1, 2, 3, 8, dtype=torch.long), _q()),
        TypeError,
        ("q", "floating", "torch.int64"),
    ),
    ("rope list q", lambda: _rope()([[1.0]], _q()), TypeError, ("q", "torch.Tensor", "list")),
    ("rope rotate rank", lambda: _rope().rotate(torch.randn(5, 8)), ValueError, ("x", "rank 2")),
    (
        "t5 heads vs module",
        lambda: _t5().attention_bias(_q(h=3), _q(h=3)),
        ValueError,
        ("heads", "3", "num_heads=4"),
    ),
    (
        "t5 scores rank",
        lambda: _t5()(torch.randn(4, 5, 5)),
        ValueError,
        ("scores", "rank 3", "(batch, heads, q_len, k_len)"),
    ),
    (
        "alibi scores heads",
        lambda: _alibi()(torch.randn(1, 3, 5, 5)),
        ValueError,
        ("scores", "3 heads", "num_heads=4"),
    ),
    (
        "alibi integer scores",
        lambda: _alibi()(torch.ones(1, 4, 5, 5, dtype=torch.long)),
        TypeError,
        ("scores", "floating", "torch.int64"),
    ),
    (
        "sinusoidal x rank",
        lambda: posenc.Sinusoidal(8)(torch.randn(5, 8)),
        ValueError,
        ("x", "rank 2", "(batch, seq, dim)"),
    ),
    (
        "sinusoidal width",
        lambda: posenc.Sinusoidal(8)(torch.randn(1, 5, 6)),
        ValueError,
        ("x", "6", "d_model=8"),
    ),
    ("learned width", lambda: posenc.Learned(8, 16)(torch.randn(1, 5, 6)), ValueError, ("6", "d_model=8")),
    ("nope x rank", lambda: posenc.NoPE()(torch.randn(5, 8)), ValueError, ("x", "rank 2")),
    (
        "sinusoidal2d tokens vs grid",
        lambda: posenc.Sinusoidal2D(8, grid_size=(2, 3))(torch.randn(1, 5, 8)),
        ValueError,
        ("5", "grid_size", "6"),
    ),
    # --- positions: negative, non-integer, wrong shape, wrong batch, wrong length
    (
        "rope negative positions",
        lambda: _rope()(_q(), _q(), torch.tensor([0, 1, -2, 3, 4])),
        ValueError,
        ("q_positions", "non-negative", "-2"),
    ),
    (
        "rope float positions",
        lambda: _rope()(_q(), _q(), torch.arange(5.0)),
        TypeError,
        ("q_positions", "integer", "torch.float32"),
    ),
    (
        "rope bool positions",
        lambda: _rope()(_q(), _q(), None, torch.ones(5, dtype=torch.bool)),
        TypeError,
        ("k_positions", "integer", "torch.bool"),
    ),
    (
        "rope positions batch",
        lambda: _rope()(_q(b=2), _q(b=2), torch.zeros(3, 5, dtype=torch.long)),
        ValueError,
        ("q_positions", "batch size 3", "2 or 1"),
    ),
    (
        "rope positions length",
        lambda: _rope()(_q(), _q(), torch.arange(4)),
        ValueError,
        ("q_positions", "length 4", "5"),
    ),
    (
        "rope positions rank 3",
        lambda: _rope()(_q(), _q(), torch.zeros(1, 1, 5, dtype=torch.long)),
        ValueError,
        ("q_positions", "rank 3", "(seq,) or (batch, seq)"),
    ),
    (
        "rope rotate negative",
        lambda: _rope().rotate(_q(), torch.tensor([0, 1, 2, 3, -1])),
        ValueError,
        ("positions", "non-negative", "-1"),
    ),
    (
        "sinusoidal negative",
        lambda: posenc.Sinusoidal(8)(torch.randn(1, 3, 8), torch.tensor([0, -5, 1])),
        ValueError,
        ("positions", "non-negative", "-5"),
    ),
    (
        "sinusoidal float positions",
        lambda: posenc.Sinusoidal(8)(torch.randn(1, 3, 8), torch.tensor([0.0, 1.0, 2.0])),
        TypeError,
        ("positions", "integer", "torch.float32"),
    ),
    (
        "sinusoidal positions batch",
        lambda: posenc.Sinusoidal(8)(torch.randn(2, 3, 8), torch.zeros(4, 3, dtype=torch.long)),
        ValueError,
        ("positions", "batch size 4", "2 or 1"),
    ),
    (
        "learned negative",
        lambda: posenc.Learned(8, 16)(torch.randn(1, 3, 8), torch.tensor([0, -1, 1])),
        ValueError,
        ("positions", "non-negative", "-1"),
    ),
    (
        "learned past max_len",
        lambda: posenc.Learned(8, 16)(torch.randn(1, 3, 8), torch.tensor([0, 16, 1])),
        ValueError,
        ("16", "max_len=16"),
    ),
    (
        "learned length past max_len",
        lambda: posenc.Learned(8, 16)(torch.randn(1, 17, 8)),
        ValueError,
        ("17", "max_len=16"),
    ),
    (
        "t5 negative",
        lambda: _t5()(torch.randn(1, 4, 3, 3), torch.tensor([0, 1, -7])),
        ValueError,
        ("q_positions", "non-negative", "-7"),
    ),
    (
        "t5 float positions",
        lambda: _t5().attention_bias(_q(), _q(), q_positions=None, k_positions=torch.arange(5.0)),
        TypeError,
        ("k_positions", "integer", "torch.float32"),
    ),
    (
        "alibi positions batch",
        lambda: _alibi()(torch.randn(2, 4, 3, 3), torch.zeros(3, 3, dtype=torch.long)),
        ValueError,
        ("q_positions", "batch size 3", "2 or 1"),
    ),
    (
        "nope negative",
        lambda: posenc.NoPE()(torch.randn(1, 3, 8), torch.tensor([0, -1, 1])),
        ValueError,
        ("positions", "non-negative", "-1"),
    ),
    (
        "sinusoidal2d patch index",
        lambda: posenc.Sinusoidal2D(8, grid_size=2)(torch.randn(1, 2, 8), torch.tensor([0, 4])),
        ValueError,
        ("positions", "4", "h*w"),
    ),
    # --- non-finite and out-of-range options
    ("rope base nan", lambda: _rope(base=math.nan), ValueError, ("base", "nan", "finite")),
    ("rope base inf", lambda: _rope(base=math.inf), ValueError, ("base", "inf", "finite")),
    ("rope base 0", lambda: _rope(base=0.0), ValueError, ("base", "0", "> 0")),
    ("rope base str", lambda: _rope(base="1e4"), TypeError, ("base", "'1e4'", "number")),
    ("rope odd head_dim", lambda: posenc.RoPE(7), ValueError, ("head_dim", "7", "even")),
    (
        "rope rotary_dim > head_dim",
        lambda: _rope(rotary_dim=10),
        ValueError,
        ("rotary_dim", "10", "head_dim=8"),
    ),
    (
        "rope layout",
        lambda: _rope(layout="neox"),
        ValueError,
        ("layout", "'neox'", "'half'", "'interleaved'"),
    ),
    (
        "sinusoidal base nan",
        lambda: posenc.Sinusoidal(8, base=math.nan),
        ValueError,
        ("base", "nan", "finite"),
    ),
    ("sinusoidal base -1", lambda: posenc.Sinusoidal(8, base=-1.0), ValueError, ("base", "-1", "> 0")),
    ("sinusoidal odd d_model", lambda: posenc.Sinusoidal(7), ValueError, ("d_model", "7", "even")),
    (
        "sinusoidal layout",
        lambda: posenc.Sinusoidal(8, layout="stacked"),
        ValueError,
        ("layout", "'stacked'", "interleaved"),
    ),
    (
        "alibi max_bias nan",
        lambda: posenc.ALiBi(4, max_bias=math.nan),
        ValueError,
        ("max_bias", "nan", "finite"),
    ),
    ("alibi heads 0", lambda: posenc.ALiBi(0), ValueError, ("num_heads", "0", "positive")),
    ("alibi causal str", lambda: posenc.ALiBi(4, causal="yes"), TypeError, ("causal", "'yes'", "bool")),
    (
        "t5 too few buckets",
        lambda: posenc.RelativeBias(4, num_buckets=3),
        ValueError,
        ("num_buckets", "3", ">= 4"),
    ),
    (
        "t5 max_distance",
        lambda: posenc.RelativeBias(4, num_buckets=32, max_distance=8),
        ValueError,
        ("max_distance", "8", "8 exact"),
    ),
    ("learned max_len 0", lambda: posenc.Learned(8, 0), ValueError, ("max_len", "0", ">= 1")),
    (
        "learned init_std nan",
        lambda: posenc.Learned(8, 4, init_std=math.nan),
        ValueError,
        ("init_std", "nan", "finite"),
    ),
    # --- rope scaling dicts
    (
        "scaling factor 0",
        lambda: _rope(scaling={"rope_type": "linear", "factor": 0.0}),
        ValueError,
        ("factor", "0"),
    ),
    (
        "scaling factor nan",
        lambda: _rope(scaling={"rope_type": "linear", "factor": math.nan}),
        ValueError,
        ("factor", "nan", "finite"),
    ),
    (
        "scaling factor -2",
        lambda: _rope(scaling={"rope_type": "dynamic", "factor": -2.0}, max_len=64),
        ValueError,
        ("factor", "-2", "> 0"),
    ),
    (
        "scaling factor str",
        lambda: _rope(scaling={"rope_type": "linear", "factor": "2"}),
        TypeError,
        ("factor", "'2'", "number"),
    ),
    (
        "scaling unknown type",
        lambda: _rope(scaling={"rope_type": "ntk_by_parts", "factor": 2.0}),
        ValueError,
        ("rope_type", "'ntk_by_parts'", "'linear'", "'yarn'", "'ntk'"),
    ),
    (
        "scaling missing factor",
        lambda: _rope(scaling={"rope_type": "linear"}),
        ValueError,
        ("factor", "linear"),
    ),
    (
        "scaling yarn missing factor",
        lambda: _rope(scaling={"rope_type": "yarn", "original_max_position_embeddings": 64}),
        ValueError,
        ("factor", "yarn"),
    ),
    (
        "scaling llama3 missing key",
        lambda: _rope(
            scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "original_max_position_embeddings": 64,
                "high_freq_factor": 4.0,
            }
        ),
        ValueError,
        ("low_freq_factor", "llama3"),
    ),
    (
        "scaling dynamic no max_len",
        lambda: _rope(scaling={"rope_type": "dynamic", "factor": 2.0}),
        ValueError,
        ("max_len", "dynamic"),
    ),
    (
        "scaling longrope list length",
        lambda: _rope(
            scaling={
                "rope_type": "longrope",
                "short_factor": [1.0] * 3,
                "long_factor": [1.0] * 4,
                "original_max_position_embeddings": 64,
                "factor": 2.0,
            }
        ),
        ValueError,
        ("short_factor", "4", "3"),
    ),
    (
        "scaling not a dict",
        lambda: _rope(scaling=[("rope_type", "linear")]),
        TypeError,
        ("scaling", "dict", "list"),
    ),
    (
        "scaling type vs rope_type",
        lambda: _rope(scaling={"rope_type": "linear", "type": "dynamic", "factor": 2.0}),
        ValueError,
        ("rope_type", "'linear'", "'dynamic'"),
    ),
    (
        "scaling partial factor > 1",
        lambda: _rope(scaling={"partial_rotary_factor": 1.5}),
        ValueError,
        ("partial_rotary_factor", "1.5", "(0, 1]"),
    ),
    (
        "resolve_rope_scaling head_dim",
        lambda: resolve_rope_scaling(None, head_dim=-4),
        ValueError,
        ("head_dim", "-4"),
    ),
    # --- registry / build
    (
        "build unknown name",
        lambda: posenc.build("ropee", head_dim=8),
        ValueError,
        ("'ropee'", "Did you mean 'rope'", "alibi"),
    ),
    (
        "build unknown option",
        lambda: posenc.build("rope(theta=5.0)", head_dim=8),
        ValueError,
        ("'theta'", "base="),
    ),
    (
        "build option type",
        lambda: posenc.build("alibi(max_bias='8')", num_heads=4),
        TypeError,
        ("max_bias", "'8'", "float"),
    ),
    ("build missing size", lambda: posenc.build("rope"), ValueError, ("head_dim", "build('rope'")),
    (
        "build non-literal",
        lambda: posenc.build("rope(base=float('nan'))", head_dim=8),
        ValueError,
        ("base", "literal"),
    ),
    (
        "build dict base nan",
        lambda: posenc.build({"name": "rope", "base": math.nan}, head_dim=8),
        ValueError,
        ("base", "nan", "finite"),
    ),
    ("build bad spec type", lambda: posenc.build(3, head_dim=8), TypeError, ("spec", "int")),
    # --- attention and the model
    (
        "attention v shape",
        lambda: posenc.attention(_q(), _q(), _q(t=4)),
        ValueError,
        ("v", "(2, 4, 4, 8)", "(2, 4, 5)"),
    ),
    (
        "attention mixed dtypes",
        lambda: posenc.attention(_q(), _q(dtype=torch.float64), _q()),
        TypeError,
        ("dtype", "torch.float32", "torch.float64"),
    ),
    (
        "attention float mask",
        lambda: posenc.attention(_q(), _q(), _q(), attn_mask=torch.zeros(5, 5)),
        TypeError,
        ("attn_mask", "torch.float32", "bool"),
    ),
    (
        "attention mask shape",
        lambda: posenc.attention(_q(), _q(), _q(), attn_mask=torch.ones(3, 5, dtype=torch.bool)),
        ValueError,
        ("attn_mask", "(3, 5)", "(2, 4, 5, 5)"),
    ),
    (
        "attention encoding type",
        lambda: posenc.attention(_q(), _q(), _q(), "rope"),
        TypeError,
        ("encoding", "str", "posenc.build"),
    ),
    (
        "attention backend",
        lambda: posenc.attention(_q(), _q(), _q(), backend="flash"),
        ValueError,
        ("backend", "'flash'", "'sdpa'"),
    ),
    (
        "attention chunk_size",
        lambda: posenc.attention(_q(), _q(), _q(), chunk_size=0),
        ValueError,
        ("chunk_size", "0", "positive"),
    ),
    (
        "attention negative k_positions",
        lambda: posenc.attention(_q(), _q(), _q(), _rope(), k_positions=torch.tensor([0, 1, 2, 3, -4])),
        ValueError,
        ("k_positions", "non-negative", "-4"),
    ),
    (
        "lm learned too long",
        lambda: TransformerLM(11, 16, 1, 2, position="learned", max_len=8)(
            torch.zeros(1, 9, dtype=torch.long)
        ),
        ValueError,
        ("9", "max_len=8"),
    ),
    (
        "lm float ids",
        lambda: TransformerLM(11, 16, 1, 2)(torch.zeros(1, 9)),
        TypeError,
        ("input_ids", "torch.float32", "integer"),
    ),
    (
        "lm mask shape",
        lambda: TransformerLM(11, 16, 1, 2)(
            torch.zeros(1, 9, dtype=torch.long), attention_mask=torch.ones(1, 8, dtype=torch.long)
        ),
        ValueError,
        ("attention_mask", "(1, 9)", "(1, 8)"),
    ),
]


@pytest.mark.parametrize(("call", "error", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_a_clear_error(call, error: type[Exception], fragments: tuple[str, ...]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unread scaling keys warn; that is not what is tested here
        with pytest.raises(error) as info:
            call()
    message = str(info.value)
    missing = [f for f in fragments if f not in message]
    assert not missing, f"message {message!r} lacks {missing}"


def test_zero_length_sequences_give_empty_results(entry: Entry) -> None:
    """Decided: a zero-length sequence is valid and every hook returns a correctly shaped empty
    result (as torch's own layers do), whatever the encoding."""
    module = entry.build()
    if entry.fixed_len is not None:
        pytest.skip("a 2D grid has a fixed number of patches")
    x = make_input(entry, 2, 0, torch.float32)
    assert module.encode_input(x).shape == (2, 0, entry.d_model)
    assert module.encode_input(x, torch.zeros(0, dtype=torch.long)).shape == (2, 0, entry.d_model)
    for tq, tk in ((0, 0), (0, 5), (3, 0)):
        q, k = make_qk(entry, 2, tq, tk, torch.float32)
        q_pos, k_pos = entry.positions(torch.arange(tq)), entry.positions(torch.arange(tk))
        q_out, k_out = module.encode_qk(q, k, q_positions=q_pos, k_positions=k_pos)
        assert q_out.shape == q.shape and k_out.shape == k.shape
        bias = module.attention_bias(q, k, q_positions=torch.arange(tq), k_positions=torch.arange(tk))
        if bias is not None:
            assert torch.broadcast_shapes(bias.shape, (2, entry.num_heads, tq, tk)) == (
                2,
                entry.num_heads,
                tq,
                tk,
            )
    for out in drop_in_call(module, entry, 2, 0, torch.float32):
        assert out.numel() == 0
    v = torch.randn(2, entry.num_heads, 0, entry.head_dim)
    q, k = make_qk(entry, 2, 0, 0, torch.float32)
    q_pos, k_pos = entry.qk_positions(0, 0, None, None)  # explicit off an axial grid
    out = posenc.attention(q, k, v, module, causal=True, q_positions=q_pos, k_positions=k_pos)
    assert out.shape == (2, entry.num_heads, 0, entry.head_dim)


def test_an_empty_batch_gives_empty_results(entry: Entry) -> None:
    """Decided: a batch of no sequences is valid (as in SDPA): every hook and attention return empty results
    of the right shape (Shaw's and Transformer-XL's content terms raised, sizing the batch with max())."""
    module, t = entry.build(), entry.fixed_len or 5
    assert module.encode_input(make_input(entry, 0, t, torch.float32)).shape == (0, t, entry.d_model)
    q, k = make_qk(entry, 0, t, t, torch.float32)
    q_pos, k_pos = entry.qk_positions(t, t, None, None)
    q_out, k_out = module.encode_qk(q, k, q_positions=q_pos, k_positions=k_pos)
    assert q_out.shape == q.shape and k_out.shape == k.shape
    bias = module.attention_bias(q, k, q_positions=q_pos, k_positions=k_pos)
    expected = (0, entry.num_heads, t, t)
    assert bias is None or torch.broadcast_shapes(bias.shape, expected) == expected
    v = torch.randn(0, entry.num_heads, t, entry.head_dim)
    out = posenc.attention(q, k, v, module, causal=True, q_positions=q_pos, k_positions=k_pos)
    assert out.shape == (0, entry.num_heads, t, entry.head_dim)


def test_no_bare_assert_in_the_package() -> None:
    """``assert`` vanishes under ``python -O``: user input must be checked with real exceptions."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        offenders += [
            f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Assert)
        ]
    assert not offenders, f"assert statements in posenc/: {offenders}"
