"""Gradients: ``torch.autograd.gradcheck`` in float64 for every hook that has parameters or is
differentiable in its inputs, and through ``posenc.attention`` on each of its paths."""

from __future__ import annotations

import pytest
import torch
from entries_table import Entry, make_input, make_qk
from torch.autograd import gradcheck, gradgradcheck
from torch.func import functional_call

import posenc


def _f64(*tensors: torch.Tensor, device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
    return tuple(t.detach().to(device, torch.float64).requires_grad_(True) for t in tensors)


def _to(device: torch.device, *tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    return tuple(None if t is None else t.to(device) for t in tensors)


POSITION_FORMS = {
    "default": lambda b, t: None,
    "shared": lambda b, t: torch.arange(3, 3 + t) * 7,
    "per-row": lambda b, t: torch.randint(0, 5000, (b, t), generator=torch.Generator().manual_seed(b * t)),
}


@pytest.mark.parametrize("form", list(POSITION_FORMS))
def test_encode_qk_gradcheck(qk_entry: Entry, form: str, device: torch.device) -> None:
    rope = qk_entry.build().to(device)
    q, k = _f64(*make_qk(qk_entry, 2, 5, 7, torch.float64, heads=4, kv_heads=2), device=device)
    q_pos = POSITION_FORMS[form](2, 5)
    k_pos = POSITION_FORMS[form](2, 7)
    if q_pos is not None and k_pos is not None and form == "shared":
        k_pos = torch.arange(7) * 7
    q_pos, k_pos = _to(
        device, *qk_entry.qk_positions(5, 7, q_pos, k_pos)
    )  # on axes; explicit off an axial grid
    # fast mode: the Jacobian checked against random vectors (hundreds of inputs: the full one is 1 s a case)
    assert gradcheck(
        lambda q, k: rope.encode_qk(q, k, q_positions=q_pos, k_positions=k_pos), (q, k), fast_mode=True
    )


def test_rope_second_derivatives(qk_entry: Entry, device: torch.device) -> None:
    """Double backward (Hessian-vector products, gradient penalties) through the rotation."""
    rope = qk_entry.build().to(device)
    q, k = _f64(*make_qk(qk_entry, 1, 4, 4, torch.float64, heads=2), device=device)
    q_pos, k_pos = _to(device, *qk_entry.qk_positions(4, 4, None, None))
    assert gradgradcheck(lambda q, k: rope.encode_qk(q, k, q_positions=q_pos, k_positions=k_pos), (q, k))


@pytest.mark.parametrize("form", list(POSITION_FORMS))
def test_encode_input_gradcheck_in_x(input_entry: Entry, form: str, device: torch.device) -> None:
    module = input_entry.build().to(device)
    (x,) = _f64(make_input(input_entry, 2, 6, torch.float64), device=device)
    positions = None if input_entry.fixed_len else POSITION_FORMS[form](2, 6)
    if positions is not None and input_entry.max_position is not None:
        positions = positions % (input_entry.max_position + 1)
    (positions,) = _to(device, positions)
    assert gradcheck(lambda x: module.encode_input(x, positions), (x,), fast_mode=True)


class _Hook(torch.nn.Module):
    """Calls one hook of an encoding as ``forward``, so that ``functional_call`` can swap its parameters."""

    def __init__(self, encoding: posenc.PositionalEncoding, hook: str) -> None:
        super().__init__()
        self.encoding = encoding
        self.hook = hook

    def forward(self, *args, **kwargs):
        if self.hook == "attention":
            return posenc.attention(*args, self.encoding, **kwargs)
        return getattr(self.encoding, self.hook)(*args, **kwargs)


def _with_params(encoding: posenc.PositionalEncoding, hook: str):
    """``(function of the parameter values, their float64 leaves)`` for gradcheck."""
    wrapper = _Hook(encoding, hook)
    names = [n for n, _ in wrapper.named_parameters()]
    leaves = tuple(_f64(p, device=p.device)[0] for _, p in wrapper.named_parameters())
    buffers = dict(wrapper.named_buffers())

    def call(args: tuple, kwargs: dict, values: tuple) -> torch.Tensor:
        state = {**buffers, **dict(zip(names, values, strict=True))}
        return functional_call(wrapper, state, args, kwargs)

    return call, leaves


def test_parameters_gradcheck(learned_entry: Entry) -> None:
    """Every learned parameter (the learned table, T5's bias table) gets the exact gradient."""
    module = learned_entry.build().double()
    positions = torch.tensor([[0, 3, 3, 9], [200, 1, 0, 255]])
    if learned_entry.fixed_len is not None:  # patch indices of a 2D grid
        positions = positions % learned_entry.fixed_len
    if "input" in learned_entry.hooks:
        hook, args, kwargs = (
            "encode_input",
            (torch.zeros(2, 4, learned_entry.d_model, dtype=torch.float64), positions),
            {},
        )
    else:
        q, k = make_qk(learned_entry, 2, 4, 4, torch.float64)
        hook, args, kwargs = "attention_bias", (q, k), {"q_positions": positions, "k_positions": positions}
    call, leaves = _with_params(module, hook)
    assert leaves, "a learned entry must have parameters"
    # fast_mode (random directions, not the full Jacobian) past 64 entries: FIRE's MLP and Shaw's
    # tables have hundreds, and a full Jacobian takes a forward per entry
    fast = sum(p.numel() for p in leaves) > 64
    assert gradcheck(lambda *values: call(args, kwargs, values), leaves, fast_mode=fast)
    if learned_entry.has_value_term:  # Shaw's relative values: the value table's gradient too
        probs = torch.rand(2, learned_entry.num_heads, 4, 4, dtype=torch.float64).softmax(-1)
        call, leaves = _with_params(module, "value_term")
        kwargs = {"q_positions": positions, "k_positions": positions}
        assert gradcheck(lambda *values: call((probs,), kwargs, values), leaves, fast_mode=fast)


def test_bias_forward_gradcheck_in_scores(bias_entry: Entry) -> None:
    module = bias_entry.build().double()
    (scores,) = _f64(torch.randn(2, bias_entry.num_heads, 4, 6, dtype=torch.float64))
    if not bias_entry.content:
        # (the bias does not depend on the scores: fast_mode for FIRE's costlier MLP bias)
        assert gradcheck(lambda s: module(s), (scores,), fast_mode=bias_entry.spec.startswith("fire"))
        return
    (q,) = _f64(make_qk(bias_entry, 2, 4, 6, torch.float64)[0])
    k = torch.zeros(2, 1, 6, bias_entry.head_dim, dtype=torch.float64)  # (its shape only is read)
    if bias_entry.has_value_term:
        # the drop-in forward refuses the value term: hand-written attention adds the two hooks
        probs = torch.rand(2, bias_entry.num_heads, 4, 6, dtype=torch.float64).requires_grad_(True)
        assert gradcheck(lambda s, q: s + module.attention_bias(q, k), (scores, q), fast_mode=True)
        assert gradcheck(lambda p: module.value_term(p), (probs,), fast_mode=True)
        return
    # a content bias: differentiable in the scores and in the queries it reads (fast_mode: a
    # full Jacobian over both is one forward per entry)
    assert gradcheck(lambda s, q: module(s, q), (scores, q), fast_mode=True)


ATTENTION_CASES = [
    ("rope", "auto", True),
    ("rope", "chunked", False),
    ("alibi", "auto", True),
    ("alibi", "chunked", True),
    ("alibi(causal=False)", "sdpa", False),
    ("t5", "auto", True),
    ("t5", "chunked", False),
    ("none", "sdpa", True),
]


@pytest.mark.parametrize(("spec", "backend", "causal"), ATTENTION_CASES)
def test_attention_gradcheck(spec: str, backend: str, causal: bool, device: torch.device) -> None:
    encoding = posenc.build(spec, num_heads=2, head_dim=4, causal=causal).double().to(device)
    gen = torch.Generator().manual_seed(0)
    inputs = (torch.randn(1, 2, t, 4, generator=gen, dtype=torch.float64) for t in (5, 6, 6))
    q, k, v = _f64(*inputs, device=device)
    call, params = _with_params(encoding, "attention")
    kwargs = {"causal": causal, "backend": backend, "chunk_size": 2}
    # fast_mode: one random direction per input instead of the full Jacobian (the chunked
    # path recomputes each chunk under checkpointing, so the full Jacobian takes ~15 s)
    # nondet_tol: a GPU's atomic adds (T5's table gradient) may sum in another order on each run
    nondet_tol = 0.0 if device.type == "cpu" else 1e-12
    assert gradcheck(
        lambda q, k, v, *values: call((q, k, v), kwargs, values),
        (q, k, v, *params),
        fast_mode=True,
        nondet_tol=nondet_tol,
    )
