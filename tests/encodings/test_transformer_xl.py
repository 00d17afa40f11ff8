"""Transformer-XL / Conformer relative positions: transformers' Wav2Vec2-Conformer and -BERT, the paper's terms."""

from __future__ import annotations

import contextlib
import copy
import math

import pytest
import torch
from transformers import Wav2Vec2BertConfig, Wav2Vec2ConformerConfig
from transformers.models.wav2vec2_bert.modeling_wav2vec2_bert import (
    Wav2Vec2BertRelPositionalEmbedding,
    Wav2Vec2BertSelfAttention,
)
from transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer import (
    Wav2Vec2ConformerRelPositionalEmbedding,
    Wav2Vec2ConformerSelfAttention,
)

import posenc
from posenc._compat import accelerator_paths
from posenc.encodings.transformer_xl import RelPosXL

# float32 attention outputs computed in another order (gather vs transformers' rel-shift).
FP32 = {"rtol": 1e-5, "atol": 1e-5}
# float64 against a float64 reference written with an explicit (tq, tk, dh) table.
FP64 = {"rtol": 1e-10, "atol": 1e-12}

HF_MODULES = {
    "wav2vec2-conformer": (
        Wav2Vec2ConformerConfig,
        Wav2Vec2ConformerSelfAttention,
        Wav2Vec2ConformerRelPositionalEmbedding,
    ),
    "wav2vec2-bert": (Wav2Vec2BertConfig, Wav2Vec2BertSelfAttention, Wav2Vec2BertRelPositionalEmbedding),
}


def _randomise(module: torch.nn.Module, seed: int) -> None:
    """Every parameter N(0, 0.3): transformers' zero / tiny inits would hide a wrong term."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


def reference_bias(q, k, xl: RelPosXL, q_pos, k_pos) -> torch.Tensor:
    """``(u·k_j + (q_i+v)·W R_{i-j}) / sqrt(dh)`` in float64 with an explicit (tq, tk, h, dh) table."""
    q, k = q.double(), k.double()
    h, dh = xl.num_heads, xl.head_dim
    rel = (q_pos[:, None] - k_pos[None, :]).double()  # i - j
    inv = 10000.0 ** (-torch.arange(0, xl.d_model, 2, dtype=torch.float64) / xl.d_model)
    ang = rel[..., None] * inv
    r = torch.stack((ang.sin(), ang.cos()), dim=-1).flatten(-2)  # (tq, tk, d_model) interleaved
    wr = (r @ xl.linear_pos.weight.double().T).view(*rel.shape, h, dh)  # (tq, tk, h, dh)
    u, v = xl.pos_bias_u.double(), xl.pos_bias_v.double()
    pos = torch.einsum("bhid,ijhd->bhij", q + v[:, None], wr)
    content = torch.einsum("hd,bhjd->bhj", u, k)[:, :, None, :]
    return (pos + content) / math.sqrt(dh)


@pytest.mark.parametrize("model", sorted(HF_MODULES))
@pytest.mark.parametrize(("heads", "hidden", "length"), [(4, 32, 11), (2, 24, 7)])
def test_attention_equals_transformers_relative_mode(
    model: str, heads: int, hidden: int, length: int, device: torch.device
) -> None:
    """The whole attention output of a random transformers self-attention (relative mode)."""
    config_class, attention_class, embedding_class = HF_MODULES[model]
    config = config_class(
        hidden_size=hidden,
        num_attention_heads=heads,
        position_embeddings_type="relative",
        max_source_positions=16,
        attention_dropout=0.0,
    )
    config._attn_implementation = "eager"
    layer = attention_class(config).eval()
    _randomise(layer, seed=heads)
    layer.to(device)
    dh = hidden // heads
    xl = posenc.build("transformer_xl", num_heads=heads, head_dim=dh, d_model=hidden)
    xl.load_state_dict(
        {
            "linear_pos.weight": layer.linear_pos.weight,
            "pos_bias_u": layer.pos_bias_u,
            "pos_bias_v": layer.pos_bias_v,
        }
    )
    xl.to(device)
    x = torch.randn(2, length, hidden, generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        expected = layer(x, relative_position_embeddings=embedding_class(config).to(device)(x))[0]

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(2, length, heads, dh).transpose(1, 2)

        q, k, v = split(layer.linear_q(x)), split(layer.linear_k(x)), split(layer.linear_v(x))
        for backend in ("auto", "chunked"):
            out = posenc.attention(q, k, v, xl.prepare(length), backend=backend, chunk_size=3)
            got = layer.linear_out(out.transpose(1, 2).reshape(2, length, hidden))
            torch.testing.assert_close(got, expected, **FP32)


@pytest.mark.parametrize("explicit", [False, True])
def test_bias_equals_the_formula_in_float64(explicit: bool) -> None:
    torch.manual_seed(2)
    xl = RelPosXL(3, 4, d_model=10).double()
    _randomise(xl, seed=3)
    q, k = torch.randn(2, 3, 5, 4, dtype=torch.float64), torch.randn(2, 3, 7, 4, dtype=torch.float64)
    if explicit:  # unordered, with gaps and repeats: distances far from the Toeplitz range
        q_pos, k_pos = torch.tensor([9, 2, 30, 4, 4]), torch.tensor([0, 31, 5, 5, 12, 1, 17])
        bias = xl.attention_bias(q, k, q_positions=q_pos, k_positions=k_pos)
    else:  # defaults: keys 0..6, queries the last 5 of them
        q_pos, k_pos = torch.arange(2, 7), torch.arange(7)
        bias = xl.attention_bias(q, k)
    assert bias.shape == (2, 3, 5, 7) and bias.dtype == torch.float64
    torch.testing.assert_close(bias, reference_bias(q, k, xl, q_pos, k_pos), **FP64)


def _authors_scores(q, k, r_net, r_w_bias, r_r_bias, base=10000.0):
    """The Transformer-XL authors' RelPartialLearnableMultiHeadAttn scores (Dai et al., 2019, their
    pytorch/mem_transformer.py), re-typed: [sin | cos] of the distances klen-1 .. 0, AC + BD and
    the _rel_shift that aligns BD. Tensors (len, batch, heads, dh), as theirs."""
    qlen, klen, d_model = q.shape[0], k.shape[0], r_net.in_features
    inv_freq = 1 / (base ** (torch.arange(0.0, d_model, 2.0, dtype=torch.float64) / d_model))
    sinusoid = torch.outer(torch.arange(klen - 1, -1, -1.0, dtype=torch.float64), inv_freq)
    r_head_k = r_net(torch.cat([sinusoid.sin(), sinusoid.cos()], -1)).view(klen, *q.shape[2:])
    ac = torch.einsum("ibnd,jbnd->ijbn", q + r_w_bias, k)
    bd = torch.einsum("ibnd,jnd->ijbn", q + r_r_bias, r_head_k)
    padded = torch.cat([bd.new_zeros(qlen, 1, *bd.shape[2:]), bd], 1).view(klen + 1, qlen, *bd.shape[2:])
    return (ac + padded[1:].view_as(bd)) / math.sqrt(q.shape[-1])  # (qlen, klen, b, h)


def test_concat_layout_equals_the_transformer_xl_authors_attention() -> None:
    """layout="concat" loads their checkpoints' r_net, r_w_bias, r_r_bias as they are; queries after a
    memory of 4 keys, compared where their causal mask keeps the scores."""
    torch.manual_seed(6)
    heads, dh, mem, qlen = 3, 4, 4, 5
    xl = RelPosXL(heads, dh, layout="concat").double()
    _randomise(xl, seed=7)
    q, k = (
        torch.randn(2, heads, qlen, dh, dtype=torch.float64),
        torch.randn(2, heads, mem + qlen, dh, dtype=torch.float64),
    )
    ours = q @ k.transpose(-1, -2) / math.sqrt(dh) + xl.attention_bias(q, k)  # queries at mem .. mem+qlen-1
    theirs = _authors_scores(
        q.permute(2, 0, 1, 3), k.permute(2, 0, 1, 3), xl.linear_pos, xl.pos_bias_u, xl.pos_bias_v
    ).permute(2, 3, 0, 1)
    keep = torch.arange(mem + qlen)[None, :] <= torch.arange(mem, mem + qlen)[:, None]
    torch.testing.assert_close(ours[..., keep], theirs[..., keep], **FP64)
    interleaved = RelPosXL(heads, dh).double()  # the same weights, R's channels in the other order
    interleaved.load_state_dict(xl.state_dict())
    other = q @ k.transpose(-1, -2) / math.sqrt(dh) + interleaved.attention_bias(q, k)
    assert not torch.allclose(other[..., keep], theirs[..., keep], **FP64)
    assert "layout='concat'" in repr(xl)
    with pytest.raises(ValueError, match="layout must be one of"):
        RelPosXL(heads, dh, layout="sin_cos")


def test_per_row_positions_and_grouped_query_heads() -> None:
    torch.manual_seed(4)
    xl = RelPosXL(4, 8)
    _randomise(xl, seed=5)
    q, k = torch.randn(2, 4, 3, 8), torch.randn(2, 2, 6, 8)  # 2 key heads, each shared by 2 query heads
    q_pos = torch.tensor([[3, 4, 5], [10, 11, 12]])
    k_pos = torch.tensor([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12]])
    bias = xl.attention_bias(q, k, q_positions=q_pos, k_positions=k_pos)
    k_full = k.repeat_interleave(2, dim=1)
    for row in range(2):
        expected = reference_bias(q[row : row + 1], k_full[row : row + 1], xl, q_pos[row], k_pos[row])
        torch.testing.assert_close(bias[row : row + 1].double(), expected, **FP32)
    # only distances matter: row 1 is row 0 shifted by 7, with its own q/k
    shifted = xl.attention_bias(q[1:], k[1:], q_positions=q_pos[0], k_positions=k_pos[0])
    torch.testing.assert_close(bias[1:], shifted, **FP32)


def test_kv_cache_decoding_equals_the_full_forward() -> None:
    torch.manual_seed(6)
    xl = RelPosXL(2, 8)
    _randomise(xl, seed=7)
    q, k, v = (torch.randn(1, 2, 9, 8) for _ in range(3))
    full = posenc.attention(q, k, v, xl, causal=True)
    for step in (0, 4, 8):
        one = posenc.attention(
            q[:, :, step : step + 1], k[:, :, : step + 1], v[:, :, : step + 1], xl, causal=True
        )
        torch.testing.assert_close(one, full[:, :, step : step + 1], **FP32)


@pytest.mark.parametrize("accelerator", [False, True], ids=["cpu", "accelerator-paths"])
def test_score_mod_equals_bias(accelerator: bool) -> None:
    """Also on the accelerator's path (no value read: the dense term from angles, read per pair)."""
    torch.manual_seed(8)
    xl = RelPosXL(3, 4)
    _randomise(xl, seed=9)
    q, k = torch.randn(2, 3, 3, 4), torch.randn(2, 3, 5, 4)
    qp, kp = torch.tensor([[2, 3, 4], [5, 6, 7]]), torch.arange(5).expand(2, 5) + torch.tensor([[0], [3]])
    bias = xl.attention_bias(q, k, q_positions=qp, k_positions=kp)
    with accelerator_paths() if accelerator else contextlib.nullcontext():
        mod = xl.score_mod(q, k, q_positions=qp, k_positions=kp)
    zero = torch.tensor(0.0)
    for b, h, i, j in [(0, 0, 0, 0), (1, 2, 2, 4), (0, 1, 1, 3), (1, 0, 0, 1)]:
        got = mod(zero, torch.tensor(b), torch.tensor(h), torch.tensor(i), torch.tensor(j))
        torch.testing.assert_close(got, bias[b, h, i, j], rtol=0, atol=1e-6)


def test_gradients_reach_every_parameter_and_transformer_lm_trains() -> None:
    torch.manual_seed(10)
    model = posenc.nn.TransformerLM(
        vocab_size=11, d_model=16, num_layers=2, num_heads=2, position="relpos_xl"
    )
    ids = torch.randint(0, 11, (2, 9))
    model(ids).sum().backward()
    enc = model.encoding
    assert isinstance(enc, RelPosXL)
    for name, p in enc.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_drop_in_forward_state_dict_copies_and_dtypes() -> None:
    xl = posenc.build("transformer_xl(base=500.0)", num_heads=2, head_dim=4)
    assert xl.d_model == 8 and xl.base == 500.0
    assert set(xl.state_dict()) == {"linear_pos.weight", "pos_bias_u", "pos_bias_v"}
    q, k = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    scores = q @ k.transpose(-1, -2) / 2.0
    torch.testing.assert_close(xl(scores, q, k), scores + xl.attention_bias(q, k), rtol=0, atol=0)
    meta = RelPosXL(2, 4, base=500.0, device="meta").to_empty(device="cpu")
    meta.load_state_dict(xl.state_dict())
    torch.testing.assert_close(meta.attention_bias(q, k), xl.attention_bias(q, k), rtol=0, atol=0)
    half = copy.deepcopy(xl).to(torch.bfloat16)
    bias = half.attention_bias(q.bfloat16(), k.bfloat16())
    assert bias.dtype == torch.float32
    torch.testing.assert_close(bias, xl.attention_bias(q, k), rtol=0.05, atol=0.05)  # bfloat16 weights
    empty = xl.attention_bias(q[:, :, :0], k)
    assert empty.shape == (1, 2, 0, 5)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="num_heads must be a positive int, got 0"):
        RelPosXL(0, 8)
    with pytest.raises(ValueError, match="d_model must be even"):
        RelPosXL(2, 8, d_model=15)
    with pytest.raises(ValueError, match="base must be > 1"):
        RelPosXL(2, 8, base=1.0)
    with pytest.raises(TypeError, match="base must be a float"):
        RelPosXL(2, 8, base="1e4")  # type: ignore[arg-type]
    xl = RelPosXL(2, 8)
    with pytest.raises(ValueError, match="num_heads=2"):
        xl.attention_bias(torch.randn(1, 3, 4, 8), torch.randn(1, 3, 4, 8))
    with pytest.raises(ValueError, match="head_dim=8"):
        xl.attention_bias(torch.randn(1, 2, 4, 4), torch.randn(1, 2, 4, 4))
    state = xl.prepare(4)
    with pytest.raises(ValueError, match="prepared for 4 queries and 4 keys"):
        state.attention_bias(torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8))


@pytest.mark.slow
def test_compiles_without_graph_breaks() -> None:
    xl = RelPosXL(2, 8)
    q, k, v = (torch.randn(1, 2, 6, 8) for _ in range(3))

    def run(q, k, v):
        return posenc.attention(q, k, v, xl)

    compiled = torch.compile(run, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(q, k, v), run(q, k, v), **FP32)


@pytest.mark.parametrize(
    ("heads", "kv_heads", "layout"), [(4, 4, "interleaved"), (4, 2, "interleaved"), (4, 2, "concat")]
)
def test_traced_form_equals_the_distance_table(heads: int, kv_heads: int, layout: str) -> None:
    """Traced programs use the angle-addition form (no data-dependent number of distances); it
    gives the per-distance table's bias for explicit, batched, far and unordered positions."""
    torch.manual_seed(0)
    xl = posenc.RelPosXL(num_heads=heads, head_dim=8, d_model=48, layout=layout).double()
    q, k = (
        torch.randn(2, heads, 5, 8, dtype=torch.float64),
        torch.randn(2, kv_heads, 7, 8, dtype=torch.float64),
    )
    cases = [
        (torch.tensor([3, 9, 4, 100, 2]), torch.arange(7) * 3),
        (torch.randint(0, 100_000, (2, 5)), torch.randint(0, 100_000, (2, 7))),
    ]
    for q_positions, k_positions in cases:
        state = xl.prepare(5, 7, q_positions=q_positions, k_positions=k_positions)
        torch.testing.assert_close(
            state.bias_from_angles(q, k), state.attention_bias(q, k), rtol=0, atol=1e-9
        )


@pytest.mark.parametrize("spec", ["transformer_xl", "shaw"])
def test_chunks_of_queries_past_their_keys_take_distances_on_one_side(spec):
    """A chunk whose queries all sit past its keys reads distances ``lo .. hi`` below 0 (a negative ``right``
    for the clipped index): the chunked path equals the one-call path (a check of ``right >= 0`` refused it)."""
    torch.manual_seed(0)
    encoding = posenc.build(spec, num_heads=4, head_dim=8, causal=False, d_model=32).double()
    q, k, v = (
        torch.randn(1, 4, 3, 8).double(),
        torch.randn(1, 4, 2, 8).double(),
        torch.randn(1, 4, 2, 8).double(),
    )
    positions = {"q_positions": torch.tensor([0, 5, 9]), "k_positions": torch.tensor([1, 2])}
    whole = posenc.attention(q, k, v, encoding, backend="sdpa", **positions)
    chunked = posenc.attention(q, k, v, encoding, backend="chunked", chunk_size=1, **positions)
    torch.testing.assert_close(chunked, whole)


@pytest.mark.parametrize("explicit", [False, True])
def test_autocast_changes_nothing_in_the_bias_and_the_drop_in_call(explicit: bool) -> None:
    # Its matmuls ran in bfloat16 inside autocast: a bfloat16 bias, the drop-in call 0.24 off (2e-6 outside).
    xl = posenc.build("transformer_xl", num_heads=4, head_dim=16, causal=False)
    q, k, scores = torch.randn(1, 4, 8, 16), torch.randn(1, 4, 8, 16), torch.randn(1, 4, 8, 8) * 30
    positions = {"q_positions": torch.arange(3, 11), "k_positions": torch.arange(3, 11)} if explicit else {}
    distances = torch.arange(-8, 8)
    with accelerator_paths() if explicit else contextlib.nullcontext():  # (explicit: the path from angles)
        outside = xl.attention_bias(q, k, **positions), xl(scores, q, k, **positions), xl.projected(distances)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            inside = (
                xl.attention_bias(q, k, **positions),
                xl(scores, q, k, **positions),
                xl.projected(distances),
            )
    for i, o in zip(inside, outside, strict=True):
        assert i.dtype == torch.float32
        torch.testing.assert_close(i, o, rtol=0, atol=0)
