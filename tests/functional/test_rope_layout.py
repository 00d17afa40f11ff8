"""posenc.functional.rope_layout: a checkpoint's q/k projection rows moved between the interleaved and the
half-split RoPE layouts (whole heads, a leading or a trailing rotary slice), checked by the scores they give
under transformers' GPT-J and GPT-NeoX rotations and under posenc's RoPE."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.functional import half_to_interleaved, interleaved_to_half, rope_layout_permutation

# Scores after a channel permutation: the same products summed in another order (float32).
SCORE_TOL = {"atol": 1e-5, "rtol": 1e-5}


# --- the conversion --------------------------------------------------------------------


def _gptj_rotate(x: torch.Tensor, positions: torch.Tensor, rotary_dim: int) -> torch.Tensor:
    """Interleaved RoPE on (b, h, t, dh) with transformers' GPT-J functions (the reference)."""
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb, create_sinusoidal_positions

    table = create_sinusoidal_positions(int(positions.max()) + 1, rotary_dim)[positions]  # (t, r)
    sin, cos = torch.split(table, rotary_dim // 2, dim=-1)
    x_bthd = x.transpose(1, 2)
    rot = apply_rotary_pos_emb(x_bthd[..., :rotary_dim], sin[None], cos[None])
    return torch.cat([rot, x_bthd[..., rotary_dim:]], dim=-1).transpose(1, 2)


def _neox_rotate(x: torch.Tensor, positions: torch.Tensor, rotary_dim: int) -> torch.Tensor:
    """Half-split RoPE on (b, h, t, dh) with transformers' GPT-NeoX functions (the reference)."""
    from transformers import GPTNeoXConfig
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding, apply_rotary_pos_emb

    head_dim = x.shape[-1]
    config = GPTNeoXConfig(
        hidden_size=head_dim * x.shape[1], num_attention_heads=x.shape[1], rotary_pct=rotary_dim / head_dim
    )
    cos, sin = GPTNeoXRotaryEmbedding(config)(x, positions[None])
    return apply_rotary_pos_emb(x, x, cos, sin)[0]


@pytest.mark.parametrize(
    ("num_heads", "num_kv_heads", "head_dim", "rotary_dim"), [(4, 4, 16, None), (4, 2, 16, 8)]
)
def test_interleaved_to_half_gives_equal_scores(num_heads, num_kv_heads, head_dim, rotary_dim):
    """A checkpoint trained with interleaved RoPE scores the same in a half-split model once converted."""
    pytest.importorskip("transformers")  # (GPT-J's and GPT-NeoX's rotations, the references)
    torch.manual_seed(0)
    width, length = 24, 11
    r = rotary_dim or head_dim
    wq, bq = torch.randn(num_heads * head_dim, width), torch.randn(num_heads * head_dim)
    wk, bk = torch.randn(num_kv_heads * head_dim, width), torch.randn(num_kv_heads * head_dim)
    x = torch.randn(2, length, width)
    positions = torch.arange(3, 3 + length)

    def project(w, b, heads):  # (b, t, i) -> (b, h, t, dh)
        return (x @ w.T + b).view(2, length, heads, head_dim).transpose(1, 2)

    def scores(q, k):
        k = k.repeat_interleave(num_heads // num_kv_heads, dim=1)
        return q @ k.transpose(-1, -2)

    reference = scores(
        _gptj_rotate(project(wq, bq, num_heads), positions, r),
        _gptj_rotate(project(wk, bk, num_kv_heads), positions, r),
    )
    wq_h, bq_h = (interleaved_to_half(t, num_heads, head_dim, rotary_dim) for t in (wq, bq))
    wk_h, bk_h = (interleaved_to_half(t, num_kv_heads, head_dim, rotary_dim) for t in (wk, bk))
    converted = scores(
        _neox_rotate(project(wq_h, bq_h, num_heads), positions, r),
        _neox_rotate(project(wk_h, bk_h, num_kv_heads), positions, r),
    )
    torch.testing.assert_close(converted, reference, **SCORE_TOL)
    # and the same through posenc's own RoPE in both layouts
    rope_i = posenc.RoPE(head_dim, layout="interleaved", rotary_dim=rotary_dim)
    rope_h = posenc.RoPE(head_dim, layout="half", rotary_dim=rotary_dim)
    ours_i = scores(
        *rope_i.encode_qk(
            project(wq, bq, num_heads),
            project(wk, bk, num_kv_heads),
            q_positions=positions,
            k_positions=positions,
        )
    )
    ours_h = scores(
        *rope_h.encode_qk(
            project(wq_h, bq_h, num_heads),
            project(wk_h, bk_h, num_kv_heads),
            q_positions=positions,
            k_positions=positions,
        )
    )
    torch.testing.assert_close(ours_i, reference, **SCORE_TOL)
    torch.testing.assert_close(ours_h, reference, **SCORE_TOL)


def test_layout_conversion_of_a_trailing_rotary_slice_gives_equal_scores():
    """[nope | rope] heads (DeepSeek V4, Mistral 4): the permutation moves only the slice from rotary_offset."""
    num_heads, head_dim, r, offset = 3, 24, 8, 16
    wq, wk = torch.randn(num_heads * head_dim, 10), torch.randn(num_heads * head_dim, 10)
    x, positions = torch.randn(2, 7, 10), torch.arange(5, 12)

    def scores(rope, w_q, w_k):
        q, k = ((x @ w.T).view(2, 7, num_heads, head_dim).transpose(1, 2) for w in (w_q, w_k))
        q, k = rope.encode_qk(q, k, q_positions=positions, k_positions=positions)
        return q @ k.mT

    pairs = posenc.RoPE(head_dim, layout="interleaved", rotary_dim=r, rotary_offset=offset)
    halves = posenc.RoPE(head_dim, layout="half", rotary_dim=r, rotary_offset=offset)
    moved = [interleaved_to_half(w, num_heads, rotary_dim=r, rotary_offset=offset) for w in (wq, wk)]
    torch.testing.assert_close(scores(halves, *moved), scores(pairs, wq, wk), **SCORE_TOL)
    assert not torch.allclose(scores(halves, wq, wk), scores(pairs, wq, wk), **SCORE_TOL)
    back = half_to_interleaved(moved[0], num_heads, rotary_dim=r, rotary_offset=offset)
    torch.testing.assert_close(back, wq, atol=0, rtol=0)
    perm = rope_layout_permutation(head_dim, r, rotary_offset=offset)
    assert perm[:offset].tolist() == list(range(offset)) and sorted(perm.tolist()) == list(range(head_dim))
    with pytest.raises(ValueError, match=r"rotary_offset must be <= head_dim - rotary_dim = 16 .*got 17"):
        rope_layout_permutation(head_dim, r, rotary_offset=17)


def test_layout_conversion_matches_the_llama_conversion_permutation():
    """interleaved_to_half is the per-head row permutation transformers' Llama conversion applies."""
    num_heads, head_dim, width = 3, 8, 5
    w = torch.randn(num_heads * head_dim, width)
    # the reshape transformers' convert_llama_weights_to_hf.py uses, written out independently
    expected = w.view(num_heads, head_dim // 2, 2, width).transpose(1, 2).reshape(num_heads * head_dim, width)
    torch.testing.assert_close(interleaved_to_half(w, num_heads), expected, atol=0, rtol=0)


@pytest.mark.parametrize("rotary_dim", [None, 4, 8])
def test_layout_conversions_are_inverse(rotary_dim):
    num_heads, head_dim = 3, 8
    w, b = torch.randn(num_heads * head_dim, 6), torch.randn(num_heads * head_dim)
    for t in (w, b):
        there = interleaved_to_half(t, num_heads, head_dim, rotary_dim)
        assert there.shape == t.shape and there.dtype == t.dtype
        torch.testing.assert_close(
            half_to_interleaved(there, num_heads, head_dim, rotary_dim), t, atol=0, rtol=0
        )
        torch.testing.assert_close(
            interleaved_to_half(half_to_interleaved(t, num_heads), num_heads), t, atol=0, rtol=0
        )
    perm = rope_layout_permutation(head_dim, rotary_dim)
    assert sorted(perm.tolist()) == list(range(head_dim))
    r = rotary_dim or head_dim
    assert perm[r:].tolist() == list(range(r, head_dim))  # pass-through channels stay put
    if r < head_dim:
        # only the rotated rows of each head move
        moved = interleaved_to_half(w, num_heads, head_dim, rotary_dim).view(num_heads, head_dim, -1)
        torch.testing.assert_close(moved[:, r:], w.view(num_heads, head_dim, -1)[:, r:], atol=0, rtol=0)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: interleaved_to_half(torch.randn(10, 4), 3), ValueError, "not a multiple of num_heads=3"),
        (lambda: interleaved_to_half(torch.randn(12, 4), 3, head_dim=5), ValueError, "expected num_heads"),
        (lambda: interleaved_to_half(torch.randn(12, 4), 3, rotary_dim=3), ValueError, "rotary_dim must be"),
        (
            lambda: interleaved_to_half(torch.randn(12, 4), 3, rotary_dim=6),
            ValueError,
            "rotary_dim must be <= head_dim=4, got 6",
        ),
        (lambda: interleaved_to_half(torch.randn(12, 4, 2), 3), ValueError, "got shape"),
        (lambda: interleaved_to_half([1.0] * 12, 3), TypeError, "weight must be a torch.Tensor"),
        (lambda: half_to_interleaved(torch.randn(12), 0), ValueError, "num_heads must be"),
        (lambda: interleaved_to_half(torch.randn(12, 4), 3.0), TypeError, "num_heads must be a positive int"),
        (lambda: rope_layout_permutation(8, to="sideways"), ValueError, r"one of \['half', 'interleaved'\]"),
    ],
)
def test_layout_conversion_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
