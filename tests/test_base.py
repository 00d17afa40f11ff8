"""The base class's hooks and the handling of positions."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.base import check_input, check_qk, mask_to_positions, resolve_positions, resolve_qk_positions


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
        mask_to_positions(torch.ones(5))
