"""The base class's hooks and the handling of positions."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc._positions import (
    check_input,
    check_qk,
    mask_to_positions,
    resolve_positions,
    resolve_qk_positions,
)
from posenc.state import PositionState


def test_base_hooks_are_no_ops():
    pe = posenc.PositionalEncoding()
    x = torch.randn(2, 3, 4)
    q, k = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 5, 4)
    assert pe.encode_input(x) is x
    q2, k2 = pe.encode_qk(q, k)
    assert q2 is q and k2 is k
    assert pe.attention_bias(q, k) is None
    assert pe.score_mod(q, k) is None


def test_default_positions_put_queries_at_the_end_of_the_keys():
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 7, 4)
    qp, kp = resolve_qk_positions(q, k)
    assert qp.tolist() == [4, 5, 6]
    assert kp.tolist() == list(range(7))


def test_query_positions_follow_given_key_positions():
    q, k = torch.randn(2, 2, 2, 4), torch.randn(2, 2, 4, 4)
    kp = torch.tensor([[0, 0, 1, 2], [0, 1, 2, 3]])
    qp, kp2 = resolve_qk_positions(q, k, k_positions=kp)
    assert qp.tolist() == [[1, 2], [2, 3]]
    assert kp2 is not None and kp2.tolist() == kp.tolist()


def test_self_attention_keys_follow_given_query_positions():
    q = torch.randn(1, 2, 3, 4)
    qp, kp = resolve_qk_positions(q, q, q_positions=torch.tensor([5, 6, 7]))
    assert qp.tolist() == kp.tolist() == [5, 6, 7]


@pytest.mark.parametrize(
    ("positions", "error", "pattern"),
    [
        (torch.tensor([0.0, 1.0, 2.0]), TypeError, r"positions must have an integer dtype.*float32"),
        (torch.tensor([True, False, True]), TypeError, r"integer dtype"),
        ([0, 1, 2], TypeError, r"torch.Tensor.*list"),
        (torch.zeros(1, 1, 3, dtype=torch.long), ValueError, r"rank 3"),
        (torch.arange(4), ValueError, r"length 4, expected 3"),
        (torch.zeros(3, 3, dtype=torch.long), ValueError, r"batch size 3, expected 2 or 1"),
        (torch.tensor([0, -1, 2]), ValueError, r"non-negative, got minimum -1"),
    ],
)
def test_bad_positions_raise_named_errors(positions, error, pattern):
    with pytest.raises(error, match=pattern):
        resolve_positions(positions, 3, batch=2)


def test_positions_for_one_row_name_that_row_and_the_queries_first():
    q = torch.randn(1, 2, 3, 4)
    both = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"^q_positions has batch size 2, expected 1$"):
        resolve_qk_positions(q, q, q_positions=both, k_positions=both)


def test_positions_keep_their_shape_and_become_long():
    p = resolve_positions(torch.tensor([[1, 2, 3]], dtype=torch.int32), 3, batch=4)
    assert p.dtype == torch.long and p.shape == (1, 3)


def test_check_input_and_check_qk_name_the_argument():
    with pytest.raises(ValueError, match=r"x must have shape \(batch, seq, dim\).*rank 2"):
        check_input(torch.randn(3, 4))
    with pytest.raises(ValueError, match="expected d_model=8"):
        check_input(torch.randn(1, 3, 4), width=8)
    with pytest.raises(TypeError, match="floating-point"):
        check_input(torch.ones(1, 3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"k must have shape \(batch, heads, seq, head_dim\)"):
        check_qk(torch.randn(1, 2, 3, 4), torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="same head_dim, got q 4 and k 6"):
        check_qk(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 6))
    with pytest.raises(ValueError, match="q has 3 heads and k has 2"):
        check_qk(torch.randn(1, 3, 3, 4), torch.randn(1, 2, 3, 4))
    check_qk(torch.randn(1, 4, 3, 4), torch.randn(1, 2, 5, 4))  # grouped-query attention is fine


def test_mask_to_positions_numbers_real_tokens_from_zero():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    assert mask_to_positions(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 0, 0], [0, 1, 2, 3, 4]]
    assert mask_to_positions(mask.bool()).tolist() == mask_to_positions(mask).tolist()
    with pytest.raises(ValueError, match=r"attention_mask must be a \(batch, seq\) tensor"):
        mask_to_positions(torch.ones(5, dtype=torch.bool))


def test_mask_to_positions_reads_a_mask_as_the_model_does():
    """A nonzero integer is one real token, as TransformerLM reads the mask (a 2 made the positions [0, 2, 2] of
    [0, 2, 1], silently); a float mask is refused, as there (an additive one, 0 to keep, reads the other way)."""
    assert mask_to_positions(torch.tensor([[0, 2, 1, 3]])).tolist() == [[0, 0, 1, 2]]
    for mask in (torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0, float("-inf")]])):
        with pytest.raises(TypeError, match=r"must be bool or 0/1 integers, got dtype torch\.float32"):
            mask_to_positions(mask)


# --- one implementation per hook: the state, applied by the base class's hooks -----------------


class _DistanceState(PositionState):
    """``-|k_pos - q_pos|``, written once: on the state."""

    def attention_bias(self, q, k):
        distance = self.k_positions.unsqueeze(-2) - self.q_positions.unsqueeze(-1)
        return -distance.abs().to(q.dtype).expand(1, q.shape[1], -1, -1)


class _Distance(posenc.PositionalEncoding):
    kind = "bias"
    state_class = _DistanceState


def test_the_base_hooks_apply_the_state_class():
    pe = _Distance()
    q, k = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8)
    assert pe.overridden_hooks == {"attention_bias"} and not pe._generic_state
    state = pe.prepare(4, 6)
    assert type(state) is _DistanceState and state.bias_form == "full"
    bias = pe.attention_bias(q, k, q_positions=torch.tensor([0, 2, 4, 6]))
    assert torch.equal(bias[0, 0], -(torch.arange(6) - torch.tensor([[0], [2], [4], [6]])).abs().float())
    assert torch.equal(pe.attention_bias(q, k), state.attention_bias(q, k))
    # hooks the state does not implement stay no-ops (and resolve no positions)
    assert pe.score_mod(q, k) is None and pe.value_term(torch.rand(2, 3, 4, 6)) is None
    q2, k2 = pe.encode_qk(q, k, q_positions=torch.tensor([-1]))
    assert q2 is q and k2 is k


def _doubled(parent: type[posenc.PositionalEncoding]) -> type[posenc.PositionalEncoding]:
    class Doubled(parent):  # type: ignore[misc,valid-type]
        def attention_bias(self, q, k, *, q_positions=None, k_positions=None):
            return 2 * super().attention_bias(q, k, q_positions=q_positions, k_positions=k_positions)

    return Doubled


BIAS_ENCODINGS = {
    "alibi": (posenc.ALiBi, {"num_heads": 4}),
    "t5": (posenc.RelativeBias, {"num_heads": 4}),
    "kerple": (posenc.KERPLE, {"num_heads": 4}),
    "fire": (posenc.FIRE, {"num_heads": 4}),
    "shaw": (posenc.ShawRelative, {"head_dim": 8}),
    "xl": (posenc.RelPosXL, {"num_heads": 4, "head_dim": 8}),
    "custom": (_Distance, {}),
}


@pytest.mark.parametrize("name", BIAS_ENCODINGS)
def test_a_subclass_that_overrides_a_hook_is_never_bypassed(name):
    """Its prepared state is the generic one, which calls its hook; the hook's super() reaches the built-in."""
    parent, options = BIAS_ENCODINGS[name]
    torch.manual_seed(0)
    built = parent(**options)
    sub = _doubled(parent)(**options)
    sub.load_state_dict(built.state_dict())
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8)
    expected = 2 * built.attention_bias(q, k)
    assert torch.equal(sub.attention_bias(q, k), expected)
    state = sub.prepare(5)
    assert type(state) is PositionState and type(built.prepare(5)) is not PositionState
    assert state.bias_form == ("key" if name == "alibi" else "full")  # the causal ALiBi's hook: key-only
    assert torch.equal(state.attention_bias(q, k), expected)
    # the attention applies the doubled bias: a score bias of 2b equals the encoding's b plus b again
    scale = 8**-0.5
    scores = (q @ k.transpose(-1, -2)) * scale + expected.expand(2, 4, 5, 5)
    scores = scores.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
    reference = scores.softmax(-1) @ v
    torch.testing.assert_close(posenc.attention(q, k, v, sub, causal=True), reference)
    torch.testing.assert_close(posenc.attention(q, k, v, state, causal=True), reference)


@pytest.mark.parametrize("parent", [posenc.ALiBi, posenc.XPos])
def test_a_subclass_keeps_the_causal_only_rules_of_its_parent(parent):
    """A subclass's generic state took the full bias form and no causal-only rule: a causal ALiBi's hook (its
    key-only bias) was used with sinks as if full (0.48 off), and in bidirectional attention, as was an xPos
    subclass. Both are refused now, as the built-in ones are (sinks: the key-only hook cannot give the full bias)."""

    class MyXPos(posenc.XPos):
        def encode_qk(self, q, k, *, q_positions=None, k_positions=None):
            return super().encode_qk(q, k, q_positions=q_positions, k_positions=k_positions)

    sub = _doubled(parent)(4) if parent is posenc.ALiBi else MyXPos(8)
    assert sub._generic_state
    q, k, v = (torch.randn(1, 4, 6, 8) for _ in range(3))
    with pytest.raises(ValueError, match=r"causal=False, but this (Doubled|MyXPos) is exact only in causal"):
        posenc.attention(q, k, v, sub, causal=False)
    if parent is posenc.ALiBi:
        with pytest.raises(ValueError, match="overrides a hook of a causal ALiBi, whose bias is key-only"):
            posenc.attention(q, k, v, sub, causal=True, sinks=torch.zeros(4))
        # (without sinks, all queries at once: the hook's key-only bias as it is; its values tested above)
        assert posenc.attention(q, k, v, sub, causal=True).shape == v.shape


def test_a_subclass_that_overrides_no_hook_keeps_the_built_in_state():
    falcon = posenc.encodings.alibi.FalconALiBi(4, head_dim=16)
    assert not falcon._generic_state
    assert type(falcon.prepare(5)) is posenc.ALiBi.state_class


def test_an_encoding_that_writes_only_hooks_works_through_the_generic_state():
    class Constant(posenc.PositionalEncoding):
        kind = "bias"

        def attention_bias(self, q, k, *, q_positions=None, k_positions=None):
            qp, kp = resolve_qk_positions(q, k, q_positions, k_positions)
            return (kp - qp.unsqueeze(-1)).float().expand(1, q.shape[1], -1, -1) * 0.1

    pe = Constant()
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    state = pe.prepare(3)
    assert (
        type(state) is PositionState
        and state.bias_form == "full"
        and pe.overridden_hooks == {"attention_bias"}
    )
    assert torch.equal(state.attention_bias(q, k), pe.attention_bias(q, k))
    bias = pe.attention_bias(q, k)
    reference = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(posenc.attention(q, k, v, pe), reference)
    assert state.score_mod(q, k) is None and not state.has_value_term


def test_a_hook_written_beside_the_state_class_is_applied_over_it():
    class Halved(posenc.PositionalEncoding):
        kind = "bias"
        state_class = _DistanceState

        def attention_bias(self, q, k, *, q_positions=None, k_positions=None):
            return super().attention_bias(q, k, q_positions=q_positions, k_positions=k_positions) / 2

    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    state = Halved().prepare(3)
    assert type(state) is PositionState
    assert torch.equal(state.attention_bias(q, k), _Distance().attention_bias(q, k) / 2)


def test_a_hook_is_applied_over_a_prepare_state_written_beside_it():
    """Whatever the subclass also writes (its own ``prepare_state``), an overridden hook is called back."""

    class Negated(_Distance):
        def prepare_state(self, q_positions, k_positions, *, q_start, k_start):
            return super().prepare_state(q_positions, k_positions, q_start=q_start, k_start=k_start)

        def attention_bias(self, q, k, *, q_positions=None, k_positions=None):
            return -super().attention_bias(q, k, q_positions=q_positions, k_positions=k_positions)

    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    state = Negated().prepare(3)
    assert Negated._generic_state and type(state) is PositionState
    assert torch.equal(state.attention_bias(q, k), -_Distance().attention_bias(q, k))


def test_a_subclass_that_overrides_a_hook_still_refuses_an_unknown_prepare_keyword():
    """The generic state (a hook overridden) takes the own state's keywords, and refuses others."""

    class Traced(posenc.RoPE):
        def encode_qk(self, q, k, **kwargs):
            return super().encode_qk(q, k, **kwargs)

    rope = Traced(16)
    assert rope.prepare(4, seq_len=8).q_len == 4
    with pytest.raises(TypeError, match=r"Traced.prepare\(\): .*unexpected keyword argument 'seq_lenn'"):
        rope.prepare(4, seq_lenn=8)


@pytest.mark.parametrize(
    ("pe", "expected"),
    [
        (posenc.Learned(64, 8), "Learned(64, max_len=8)"),
        (posenc.Learned(64, 8, offset=2), "Learned(64, max_len=8, offset=2)"),
        (
            posenc.Sinusoidal(8, base=500, layout="concat", offset=2, freq_spacing="tensor2tensor"),
            "Sinusoidal(8, base=500.0, layout='concat', freq_spacing='tensor2tensor', offset=2)",
        ),
        (
            posenc.Learned2D(8, (2, 3), interpolate=False),
            "Learned2D(8, grid_size=(2, 3), num_prefix_tokens=0, interpolate=False, mode='bicubic', antialias=False)",
        ),
        (
            posenc.RelPosXL(2, 4, base=10000),
            "RelPosXL(\n  num_heads=2, head_dim=4, d_model=8\n  (linear_pos): Linear(in_features=8, out_features=8, bias=False)\n)",
        ),
        (posenc.NoPE(), "NoPE()"),
    ],
)
def test_repr_shows_the_options_named_by_the_class(pe, expected):
    # names before "/" bare, optional ones only away from the constructor's default
    assert repr(pe) == expected


def test_repr_of_a_subclass_whose_constructor_drops_an_option_shows_it():
    class Shifted(posenc.Sinusoidal):
        def __init__(self, d_model: int) -> None:
            super().__init__(d_model, offset=0)

    expected = "Shifted(8, base=10000.0, layout='interleaved', freq_spacing='paper', offset=0, scale=1.0)"
    assert repr(Shifted(8)) == expected
