"""Shaw et al.'s relative keys and values: the paper's equations, the seed's table, Wav2Vec2-BERT."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn
from transformers import Wav2Vec2BertConfig
from transformers.models.wav2vec2_bert.modeling_wav2vec2_bert import Wav2Vec2BertSelfAttention

import posenc
from posenc.encodings.shaw import ShawRelative

# float64 against float64 computed in another order (gather/scatter vs a (t, t, d) table).
FP64 = {"rtol": 1e-10, "atol": 1e-12}
# float32 against a float64 reference / another float32 order of summation.
FP32 = {"rtol": 1e-5, "atol": 1e-5}


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    shaw: ShawRelative,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    causal: bool,
) -> torch.Tensor:
    """The paper's eqs. 3-4 written out in float64 with explicit (tq, tk, dh) tables a^K, a^V (``beyond="zero"``:
    zero vectors for the pairs farther apart than the clip, VITS's)."""
    q, k, v = q.double(), k.double(), v.double()
    distance = k_pos[None, :] - q_pos[:, None]
    rel = distance.clamp(-shaw.max_distance, shaw.right) + shaw.max_distance
    inside = (distance >= -shaw.max_distance) & (distance <= shaw.right)
    kept = inside.double()[..., None] if shaw.beyond == "zero" else 1.0
    a_k = shaw.key_embeddings.weight.double()[rel] * kept  # (tq, tk, dh)
    e = (q @ k.transpose(-1, -2) + torch.einsum("bhid,ijd->bhij", q, a_k)) / math.sqrt(q.shape[-1])
    if causal:
        e = e.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    alpha = e.softmax(-1)
    z = alpha @ v
    if shaw.values:  # "shared": OpenNMT-py's relations_values read the key table
        table = shaw.key_embeddings if shaw.values == "shared" else shaw.value_embeddings
        assert table is not None
        a_v = table.weight.double()[rel] * kept
        z = z + torch.einsum("bhij,ijd->bhid", alpha, a_v)
    return z


def manual_attention(q, k, v, shaw, causal, q_positions=None, k_positions=None):
    """Hand-written attention through the two hooks only."""
    kw = {"q_positions": q_positions, "k_positions": k_positions}
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + shaw.attention_bias(q, k, **kw)
    if causal:
        tq, tk = scores.shape[-2:]
        scores = scores.masked_fill(~torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq), float("-inf"))
    probs = scores.softmax(-1)
    term = shaw.value_term(probs, **kw)
    return probs @ v + (0 if term is None else term)


def shaw_inputs(tq=6, tk=6, b=2, h=3, dh=8, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, t, dh, generator=g, dtype=dtype) for t in (tq, tk, tk))


@pytest.mark.parametrize("beyond", ["clip", "zero"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("values", [False, True, "shared"])
@pytest.mark.parametrize(("left", "right"), [(2, None), (3, 1), (0, None), (9, 9)])
def test_hooks_equal_the_paper_in_float64(
    causal: bool, values: bool, left: int, right: int | None, beyond: str
) -> None:
    torch.manual_seed(0)
    shaw = ShawRelative(8, max_distance=left, max_distance_right=right, values=values, beyond=beyond).double()
    q, k, v = shaw_inputs()
    pos = torch.arange(6)
    expected = reference_attention(q, k, v, shaw, pos, pos, causal)
    torch.testing.assert_close(manual_attention(q, k, v, shaw, causal), expected, **FP64)


@pytest.mark.parametrize("beyond", ["clip", "zero"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("values", [False, True, "shared"])
def test_posenc_attention_equals_the_paper(causal: bool, values: bool | str, beyond: str) -> None:
    torch.manual_seed(1)
    shaw = ShawRelative(8, max_distance=2, max_distance_right=3, values=values, beyond=beyond)
    q, k, v = shaw_inputs(tq=7, tk=7, dtype=torch.float32)
    pos = torch.arange(7)
    expected = reference_attention(q, k, v, shaw, pos, pos, causal).float()
    for backend in ("auto", "sdpa", "chunked"):
        out = posenc.attention(q, k, v, shaw, causal=causal, backend=backend, chunk_size=3)
        torch.testing.assert_close(out, expected, **FP32)


@pytest.mark.parametrize("values", [False, True])
def test_kv_cache_positions_queries_at_the_end(values: bool) -> None:
    """Queries at the last tq of tk positions (decoding), by default and with explicit (b, t) positions."""
    torch.manual_seed(2)
    shaw = ShawRelative(8, max_distance=3, values=values).double()
    q, k, v = shaw_inputs(tq=2, tk=9)
    expected = reference_attention(q, k, v, shaw, torch.arange(7, 9), torch.arange(9), causal=True)
    torch.testing.assert_close(manual_attention(q, k, v, shaw, True), expected, **FP64)
    # The same through (b, t) positions shifted by 5: only distances matter.
    qp, kp = torch.arange(12, 14).expand(2, 2), torch.arange(5, 14).expand(2, 9)
    got = manual_attention(q, k, v, shaw, True, q_positions=qp, k_positions=kp)
    torch.testing.assert_close(got, expected, **FP64)
    # The full forward's last rows equal the decoding step.
    q_all = torch.cat([torch.randn(2, 3, 7, 8, dtype=torch.float64), q], 2)
    full = manual_attention(q_all, k, v, shaw, True)
    torch.testing.assert_close(full[:, :, -2:], expected, **FP64)


def test_state_narrow_slices_for_query_chunks() -> None:
    torch.manual_seed(3)
    shaw = ShawRelative(8, max_distance=2, values=True).double()
    q, k, _ = shaw_inputs(tq=8, tk=8)
    state = shaw.prepare(8)
    bias, probs = state.attention_bias(q, k), torch.rand(2, 3, 8, 8, dtype=torch.float64)
    term = state.value_term(probs)
    block = state.narrow(slice(3, 6), slice(0, 6))
    torch.testing.assert_close(block.attention_bias(q[:, :, 3:6], k[:, :, :6]), bias[:, :, 3:6, :6], **FP64)
    part = block.value_term(probs[:, :, 3:6, :6])
    expected = shaw.value_term(
        probs[:, :, 3:6, :6], q_positions=torch.arange(3, 6), k_positions=torch.arange(6)
    )
    torch.testing.assert_close(part, expected, **FP64)
    assert term is not None and term.shape == (2, 3, 8, 8)


def test_seed_table_equals_relative_embeddings() -> None:
    """The articles' RelativePositionalEncoding, re-typed: its table is relative_embeddings(length)."""

    class RelativePositionalEncoding(nn.Module):
        def __init__(self, max_relative_position, d_model):
            super().__init__()
            self.max_relative_position = max_relative_position
            self.relative_attention_bias = nn.Parameter(torch.randn(2 * max_relative_position + 1, d_model))

        def forward(self, length):
            context_position = torch.arange(length, dtype=torch.long)[:, None]
            memory_position = torch.arange(length, dtype=torch.long)[None, :]
            relative_position = memory_position - context_position
            relative_position_bucket = relative_position + self.max_relative_position
            return self.relative_attention_bias[relative_position_bucket]

    seed = RelativePositionalEncoding(5, 16)
    shaw = ShawRelative(16, max_distance=5)
    with torch.no_grad():
        shaw.key_embeddings.weight.copy_(seed.relative_attention_bias)
    for length in (1, 4, 6):  # the seed does not clip: lengths up to K + 1
        torch.testing.assert_close(shaw.relative_embeddings(length), seed(length), rtol=0, atol=0)
    # Past K + 1 the seed indexes out of range; posenc clips to the end rows.
    table = shaw.relative_embeddings(9)
    torch.testing.assert_close(table[0, 8], shaw.key_embeddings.weight[10], rtol=0, atol=0)
    # beyond="zero" (VITS): the same rows within the clip, zero vectors past it
    zero = ShawRelative(16, max_distance=5, beyond="zero")
    zero.load_state_dict(shaw.state_dict())
    far = (torch.arange(9)[None, :] - torch.arange(9)[:, None]).abs() > 5
    torch.testing.assert_close(zero.relative_embeddings(9)[~far], table[~far], rtol=0, atol=0)
    assert zero.relative_embeddings(9)[far].eq(0).all() and table[far].ne(0).any()


def test_shared_table_is_one_parameter_for_both_terms() -> None:
    """values="shared" (OpenNMT-py): the state dict holds the key table only, and the value term's
    gradient reaches it."""
    shaw = ShawRelative(8, max_distance=2, values="shared")
    assert list(shaw.state_dict()) == ["key_embeddings.weight"] and "values='shared'" in repr(shaw)
    probs = torch.rand(2, 3, 5, 5).softmax(-1)
    (grad,) = torch.autograd.grad(shaw.value_term(probs).sum(), shaw.key_embeddings.weight)
    assert grad.abs().sum() > 0
    torch.testing.assert_close(shaw.relative_embeddings(4, which="value"), shaw.relative_embeddings(4))


def test_per_head_tables() -> None:
    torch.manual_seed(4)
    shaw = ShawRelative(4, max_distance=2, num_heads=3, per_head=True, values=True).double()
    q, k, v = shaw_inputs(tq=5, tk=5, h=3, dh=4)
    out = manual_attention(q, k, v, shaw, causal=False)
    # Each head alone equals a shared-table encoding holding that head's slice.
    for head in range(3):
        one = ShawRelative(4, max_distance=2, values=True).double()
        with torch.no_grad():
            one.key_embeddings.weight.copy_(shaw.key_embeddings.weight.view(5, 3, 4)[:, head])
            one.value_embeddings.weight.copy_(shaw.value_embeddings.weight.view(5, 3, 4)[:, head])
        sl = slice(head, head + 1)
        expected = manual_attention(q[:, sl], k[:, sl], v[:, sl], one, causal=False)
        torch.testing.assert_close(out[:, sl], expected, **FP64)
    assert shaw.relative_embeddings(3).shape == (3, 3, 3, 4)
    with pytest.raises(ValueError, match="num_heads=3"):
        shaw.attention_bias(q[:, :2], k[:, :2])


def test_gradients_reach_both_tables() -> None:
    torch.manual_seed(5)
    shaw = ShawRelative(4, max_distance=1, values=True).double()
    q, k, v = shaw_inputs(tq=4, tk=4, b=1, h=2, dh=4)
    q.requires_grad_(True)

    def f(wk: torch.Tensor, wv: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        shaw.key_embeddings.weight, shaw.value_embeddings.weight = wk, wv  # type: ignore[union-attr]
        return manual_attention(q, k, v, shaw, causal=True)

    wk = shaw.key_embeddings.weight.detach().clone().requires_grad_(True)
    wv = shaw.value_embeddings.weight.detach().clone().requires_grad_(True)
    shaw = copy.deepcopy(shaw)
    del shaw.key_embeddings.weight, shaw.value_embeddings.weight
    assert torch.autograd.gradcheck(f, (wk, wv, q))


def test_gradients_through_attention_and_transformer_lm() -> None:
    torch.manual_seed(6)
    model = posenc.nn.TransformerLM(
        vocab_size=11, d_model=16, num_layers=2, num_heads=2, position="shaw(max_distance=4, values=True)"
    )
    ids = torch.randint(0, 11, (2, 9))
    model(ids).sum().backward()
    enc = model.encoding
    assert isinstance(enc, ShawRelative)
    assert enc.key_embeddings.weight.grad is not None and enc.key_embeddings.weight.grad.abs().sum() > 0
    assert enc.value_embeddings is not None and enc.value_embeddings.weight.grad is not None
    assert enc.value_embeddings.weight.grad.abs().sum() > 0


def test_wav2vec2_bert_relative_key_parity(device: torch.device) -> None:
    """Wav2Vec2-BERT's relative_key mode (asymmetric clipping) equals posenc.attention with Shaw's key term."""
    torch.manual_seed(7)
    config = Wav2Vec2BertConfig(
        hidden_size=32,
        num_attention_heads=4,
        position_embeddings_type="relative_key",
        left_max_position_embeddings=5,
        right_max_position_embeddings=2,
        attention_dropout=0.0,
    )
    config._attn_implementation = "eager"
    layer = Wav2Vec2BertSelfAttention(config).eval()
    shaw = posenc.build("shaw(max_distance=5, max_distance_right=2)", head_dim=8, num_heads=4, causal=False)
    shaw.load_state_dict({"key_embeddings.weight": layer.distance_embedding.weight})
    layer.to(device), shaw.to(device)
    x = torch.randn(2, 12, 32).to(device)
    with torch.no_grad():
        expected = layer(x)[0]

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(2, 12, 4, 8).transpose(1, 2)

        q, k, v = heads(layer.linear_q(x)), heads(layer.linear_k(x)), heads(layer.linear_v(x))
        out = posenc.attention(q, k, v, shaw)
        got = layer.linear_out(out.transpose(1, 2).reshape(2, 12, 32))
    torch.testing.assert_close(got, expected, **FP32)


@pytest.mark.parametrize("beyond", ["clip", "zero"])
def test_score_mod_equals_bias(beyond: str) -> None:
    torch.manual_seed(8)
    shaw = ShawRelative(8, max_distance=2, beyond=beyond)
    q, k, _ = shaw_inputs(tq=3, tk=5, dtype=torch.float32)
    qp, kp = torch.tensor([[2, 3, 4], [5, 6, 7]]), torch.arange(5).expand(2, 5) + torch.tensor([[0], [3]])
    bias = shaw.attention_bias(q, k, q_positions=qp, k_positions=kp)
    mod = shaw.score_mod(q, k, q_positions=qp, k_positions=kp)
    zero = torch.tensor(0.0)
    for b, h, i, j in [(0, 0, 0, 0), (1, 2, 2, 4), (0, 1, 1, 3), (1, 0, 0, 1)]:
        got = mod(zero, torch.tensor(b), torch.tensor(h), torch.tensor(i), torch.tensor(j))
        torch.testing.assert_close(got, bias[b, h, i, j], rtol=0, atol=1e-6)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="max_distance must be >= 0, got -1"):
        ShawRelative(8, max_distance=-1)
    with pytest.raises(ValueError, match="max_distance_right must be >= 0"):
        ShawRelative(8, max_distance_right=-2)
    with pytest.raises(ValueError, match="values must be a bool or 'shared', got 'yes'"):
        ShawRelative(8, values="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="values must be a bool or 'shared', got 1"):
        ShawRelative(8, values=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="per_head=True needs num_heads"):
        ShawRelative(8, per_head=True)
    shaw = ShawRelative(8, max_distance=2, values=True)
    q, k, _ = shaw_inputs(tq=3, tk=3, dtype=torch.float32)
    scores = q @ k.transpose(-1, -2)
    with pytest.raises(ValueError, match=r"cannot apply the value term.*posenc.attention"):
        shaw(scores, q)
    with pytest.raises(ValueError, match="score_mod cannot"):
        shaw.score_mod(q, k)
    with pytest.raises(ValueError, match="head_dim=8"):
        shaw.attention_bias(q[..., :4], k[..., :4])
    with pytest.raises(ValueError, match="which='value' needs values=True"):
        ShawRelative(8).relative_embeddings(3, which="value")


def test_drop_in_forward_adds_the_key_term() -> None:
    shaw = ShawRelative(8, max_distance=2)
    q, k, _ = shaw_inputs(tq=4, tk=4, dtype=torch.float32)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8)
    torch.testing.assert_close(shaw(scores, q), scores + shaw.attention_bias(q, k), rtol=0, atol=0)


def test_checkpoint_dtype_and_copies() -> None:
    shaw = posenc.build("shaw(max_distance=3, values=True)", head_dim=8)
    assert set(shaw.state_dict()) == {"key_embeddings.weight", "value_embeddings.weight"}
    meta = ShawRelative(8, max_distance=3, values=True, device="meta").to_empty(device="cpu")
    meta.load_state_dict(shaw.state_dict())
    q, k, _ = shaw_inputs(tq=4, tk=4, dtype=torch.float32)
    torch.testing.assert_close(meta.attention_bias(q, k), shaw.attention_bias(q, k), rtol=0, atol=0)
    half = copy.deepcopy(shaw).to(torch.bfloat16)
    bias = half.attention_bias(q.bfloat16(), k.bfloat16())
    assert bias.dtype == torch.float32


class _Attention(nn.Module):
    """``posenc.attention`` with one encoding, as a module (for ``torch.export`` and ``functional_call``)."""

    def __init__(
        self, encoding: posenc.PositionalEncoding, causal: bool, backend: str, packed: bool = False
    ) -> None:
        super().__init__()
        self.encoding, self.causal, self.backend, self.packed = encoding, causal, backend, packed

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # Packed: documents of 3 tokens, ids 0 and 1 alternating (an id recurs).
        ids = (torch.arange(q.shape[2]) // 3) % 2 if self.packed else None
        return posenc.attention(
            q, k, v, self.encoding, causal=self.causal, backend=self.backend, chunk_size=3, document_ids=ids
        )


@pytest.mark.parametrize(("per_head", "packed"), [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("causal", [True, False])
def test_value_term_exports_with_a_dynamic_length(causal: bool, per_head: bool, packed: bool) -> None:
    """One exported program serves every length: no Python chunk range fixes it."""
    torch.manual_seed(7)
    shaw = ShawRelative(8, max_distance=3, values=True, num_heads=2, per_head=per_head)
    module = _Attention(shaw, causal, "auto", packed=packed)
    t = torch.export.Dim("t", min=3, max=512)
    example = shaw_inputs(tq=10, tk=10, h=2, dtype=torch.float32)
    program = torch.export.export(module, example, dynamic_shapes=({2: t},) * 3)
    for length in (5, 23):
        q, k, v = shaw_inputs(tq=length, tk=length, h=2, dtype=torch.float32, seed=length)
        torch.testing.assert_close(program.module()(q, k, v), module(q, k, v), **FP32)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("backend", ["auto", "chunked"])
@pytest.mark.parametrize("name", ["shaw", "alibi", "t5", "fire"])
def test_torch_func_grad_equals_autograd(name: str, backend: str, packed: bool) -> None:
    """``torch.func.grad`` through the chunked paths (no checkpoint's saved tensor hooks): to q and to the tables."""
    torch.manual_seed(8)
    spec = "shaw(values=True)" if name == "shaw" else name
    enc = posenc.build(spec, num_heads=3, head_dim=8, max_len=64, causal=True).double()
    module = _Attention(enc, causal=True, backend=backend, packed=packed)
    q, k, v = shaw_inputs(tq=9, tk=9)
    params = {n: p.detach() for n, p in module.named_parameters()}

    def loss(params: dict[str, torch.Tensor], q: torch.Tensor) -> torch.Tensor:
        out = torch.func.functional_call(module, params, (q, k, v))
        return (out * out).sum()

    d_params, d_q = torch.func.grad(loss, argnums=(0, 1))(params, q)
    q_ref = q.clone().requires_grad_(True)
    loss(dict(module.named_parameters()), q_ref).backward()
    torch.testing.assert_close(d_q, q_ref.grad, **FP64)
    for n, p in module.named_parameters():
        torch.testing.assert_close(d_params[n], p.grad, **FP64, msg=n)
