"""The one table of registry entries that drives the generic hardening tests.

``conftest.py`` parametrizes every test in this folder that takes an argument named
``entry`` over the rows of :data:`ENTRIES`; an argument named ``input_entry``,
``qk_entry``, ``bias_entry``, ``attention_entry`` (qk or bias), ``learned_entry`` or
``cached_entry`` runs over the rows where that hook acts (or that have learned parameters, or
float caches); ``main_entry`` runs over every row too, but a row marked ``variant`` (another
row's code with other constants) only under ``-m slow``: for the costly tests (compile, export,
threads). Adding an encoding (or a
variant worth covering) to the registry means adding one row here; every generic test then
covers it. (The table lives in this uniquely named module rather than in ``conftest.py`` so
that test modules can import its helpers without ``import conftest``, which is ambiguous
once another ``conftest.py`` exists outside a package.)

An :class:`Entry` knows how to build its module through :func:`posenc.build` (the spec
string a user would write, plus the model's sizes) and how to make inputs for each hook.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from hypothesis import HealthCheck, settings

import posenc
from posenc import PositionalEncoding

Hook = Literal["input", "qk", "bias"]

#: The model sizes handed to :func:`posenc.build` (each encoding takes those it declares).
D_MODEL = 16
NUM_HEADS = 4
HEAD_DIM = 8
MAX_LEN = 256  # the learned table's size; for RoPE only the first table size (not a limit)

# Hypothesis: few examples per test (the suite runs on 2 shared cores), no per-example deadline
# (the first call of a shape may build a cache; timing is not what these tests check), and the same
# examples on every run so that CI is reproducible (the thorough profile below explores at random).
settings.register_profile(
    "posenc-hardening",
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "posenc-hardening-thorough",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: The profile the property tests use (``@PROFILE``); POSENC_HYPOTHESIS_PROFILE=posenc-hardening-thorough
#: runs a long local fuzzing session.
PROFILE = settings.get_profile(os.environ.get("POSENC_HYPOTHESIS_PROFILE", "posenc-hardening"))


@dataclass(frozen=True)
class Entry:
    """One registry entry (a spec and sizes) and where its encoding acts.

    Attributes:
        id: the test id.
        spec: what a user passes to :func:`posenc.build`.
        dims: the model sizes passed along (overriding the defaults above).
        hooks: the hooks that change their input (``encode_input``, ``encode_qk``) or return
            a bias (``attention_bias``); every other hook must be a no-op.
        fixed_len: the only sequence length the encoding accepts (a 2D patch grid).
        max_position: the largest position it accepts (the learned table), else ``None``.
        relative: rotary/bias encodings whose output depends only on ``k_pos - q_pos``
            (so it is shift-invariant); ``False`` for length-dependent RoPE variants.
        variant: the row runs another row's code with other constants (a scaling's
            frequencies, a layout of the same table, T5's other bucket direction); the costly
            generic tests (``main_entry``: compile, export, threads) run it under ``-m slow`` only.
    """

    id: str
    spec: Any
    dims: dict[str, Any] = field(default_factory=dict)
    hooks: frozenset[Hook] = frozenset()
    fixed_len: int | None = None
    max_position: int | None = None
    relative: bool = True
    variant: bool = False

    @property
    def sizes(self) -> dict[str, Any]:
        sizes = {
            "d_model": D_MODEL,
            "num_heads": NUM_HEADS,
            "head_dim": HEAD_DIM,
            "max_len": MAX_LEN,
            "causal": True,
        }
        sizes.update(self.dims)
        return sizes

    def build(self, **overrides: Any) -> PositionalEncoding:
        """A fresh module, built exactly as a user would with :func:`posenc.build`."""
        sizes = self.sizes
        sizes.update(overrides)
        return posenc.build(self.spec, **sizes)

    @property
    def num_heads(self) -> int:
        return self.sizes["num_heads"]

    @property
    def head_dim(self) -> int:
        return self.sizes["head_dim"]

    @property
    def d_model(self) -> int:
        return self.sizes["d_model"]

    @property
    def has_params(self) -> bool:
        return any(True for _ in self.build().parameters())


_LONGROPE = {
    "rope_type": "longrope",
    "short_factor": [1.0, 1.1, 1.3, 1.6],
    "long_factor": [1.5, 2.0, 3.0, 4.0],
    "original_max_position_embeddings": 64,
    "factor": 4.0,
}

#: The table. Sizes: ``d_model=16``, ``num_heads=4``, ``head_dim=8`` unless the row says otherwise.
ENTRIES: tuple[Entry, ...] = (
    Entry("sinusoidal", "sinusoidal", hooks=frozenset({"input"})),
    Entry(
        "sinusoidal-concat-t2t",
        "sinusoidal(layout='concat', freq_spacing='tensor2tensor')",
        hooks=frozenset({"input"}),
        variant=True,
    ),
    Entry("sinusoidal-offset", "sincos(offset=2, max_len=8)", hooks=frozenset({"input"}), variant=True),
    Entry("sinusoidal2d", "sinusoidal2d(grid_size=(3, 4))", hooks=frozenset({"input"}), fixed_len=12),
    Entry("learned", "learned", hooks=frozenset({"input"}), max_position=MAX_LEN - 1),
    Entry("rope", "rope", hooks=frozenset({"qk"})),
    Entry(
        "rope-interleaved-partial",
        "rotary(layout='interleaved', rotary_dim=4, max_len=16)",
        hooks=frozenset({"qk"}),
    ),
    Entry(
        "rope-linear",
        {"name": "rope", "scaling": {"rope_type": "linear", "factor": 2.0}},
        hooks=frozenset({"qk"}),
        variant=True,
    ),
    Entry(
        "rope-dynamic",
        "rope(scaling={'rope_type': 'dynamic', 'factor': 2.0}, max_len=64)",
        hooks=frozenset({"qk"}),
        relative=False,
    ),
    Entry(
        "rope-yarn",
        "rope(base=500000.0, scaling={'rope_type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 64})",
        hooks=frozenset({"qk"}),
        variant=True,
    ),
    Entry(
        "rope-llama3",
        {
            "name": "rope",
            "scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        },
        hooks=frozenset({"qk"}),
        variant=True,
    ),
    Entry("rope-longrope", {"name": "rope", "scaling": _LONGROPE}, hooks=frozenset({"qk"}), relative=False),
    Entry("t5-bidirectional", "t5", dims={"causal": False}, hooks=frozenset({"bias"}), variant=True),
    Entry("t5-causal", "relative_bias(num_buckets=16, max_distance=20)", hooks=frozenset({"bias"})),
    Entry("alibi-causal", "alibi", hooks=frozenset({"bias"})),
    Entry(
        "alibi-bidirectional-6-heads",
        "alibi(max_bias=6.0)",
        dims={"causal": False, "num_heads": 6},
        hooks=frozenset({"bias"}),
    ),
    Entry("nope", "none"),
)

SUBSETS = {
    "entry": lambda e: True,
    "main_entry": lambda e: True,  # every row; conftest marks the variants slow
    "input_entry": lambda e: "input" in e.hooks,
    "qk_entry": lambda e: "qk" in e.hooks,
    "bias_entry": lambda e: "bias" in e.hooks,
    "attention_entry": lambda e: bool(e.hooks & {"qk", "bias"}),
    "learned_entry": lambda e: e.has_params,
    "cached_entry": lambda e: any(b.is_floating_point() for b in e.build().buffers()),
}


def entries(kind: str = "entry") -> list[Entry]:
    """The rows of :data:`ENTRIES` that a fixture name selects (see the module docstring)."""
    return [e for e in ENTRIES if SUBSETS[kind](e)]


# --- inputs for each hook ---------------------------------------------------------------------------


def make_input(
    entry: Entry, batch: int, length: int, dtype: torch.dtype, *, generator: torch.Generator | None = None
):
    """``x`` of shape ``(b, t, d)`` for ``encode_input`` (``t`` is forced for a fixed grid)."""
    length = entry.fixed_len if entry.fixed_len is not None else length
    return torch.randn(batch, length, entry.d_model, generator=generator, dtype=torch.float64).to(dtype)


def make_qk(
    entry: Entry,
    batch: int,
    q_len: int,
    k_len: int,
    dtype: torch.dtype,
    *,
    heads: int | None = None,
    kv_heads: int | None = None,
    generator: torch.Generator | None = None,
):
    """``q`` ``(b, h, tq, dh)`` and ``k`` ``(b, h_kv, tk, dh)`` (``h == num_heads`` for bias encodings)."""
    heads = heads or entry.num_heads
    kv_heads = kv_heads or heads
    q = torch.randn(batch, heads, q_len, entry.head_dim, generator=generator, dtype=torch.float64).to(dtype)
    k = torch.randn(batch, kv_heads, k_len, entry.head_dim, generator=generator, dtype=torch.float64).to(
        dtype
    )
    return q, k


def drop_in_call(
    module: PositionalEncoding,
    entry: Entry,
    batch: int,
    length: int,
    dtype: torch.dtype,
    *,
    device: torch.device | str = "cpu",
):
    """Call the module's natural ``forward`` on fitting random inputs; returns its output as a tuple."""
    if module.kind == "rotary":
        q, k = make_qk(entry, batch, length, length, dtype)
        return module(q.to(device), k.to(device))
    if module.kind == "bias":
        scores = torch.randn(batch, entry.num_heads, length, length, dtype=torch.float64).to(dtype)
        return (module(scores.to(device)),)
    return (module(make_input(entry, batch, length, dtype).to(device)),)


FLOAT_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
HALF_DTYPES = (torch.bfloat16, torch.float16)
