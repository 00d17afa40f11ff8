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
        axes: positions with axes (``(t, a)`` / ``(b, t, a)``: axial RoPE, M-RoPE); the tests make
            them from their 1D positions with :meth:`positions`. 0 for 1D positions.
        grid_len: the only token count at which the encoding has default positions (an axial
            RoPE's ``grid_size``); at other lengths :meth:`qk_positions` makes them explicit.
        content: the bias reads the queries' values (Shaw's relative keys ``q . a_K(j - i)``), so
            its drop-in ``forward(scores, q, ...)`` takes the queries too.
        causal_only: exact only under causal attention (xPos: its factor grows for later keys).
        norm_preserving: a rotary encoding whose hooks keep each pair's norm (times
            ``attention_scaling``); ``False`` for xPos's decay and Llama 4's query temperature.
        key_positions: the scores depend on the keys' positions (``False`` for the query temperature,
            which scales queries by their absolute position and leaves keys alone).
        position_limit: positions the property tests draw stay below this (xPos: keys grow as
            ``zeta ** (-n / scale_base)`` and leave float16's range past ~8 scale bases).
    """

    id: str
    spec: Any
    dims: dict[str, Any] = field(default_factory=dict)
    hooks: frozenset[Hook] = frozenset()
    fixed_len: int | None = None
    max_position: int | None = None
    relative: bool = True
    variant: bool = False
    axes: int = 0
    grid_len: int | None = None
    content: bool = False
    causal_only: bool = False
    norm_preserving: bool = True
    key_positions: bool = True
    position_limit: int | None = None

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

    @property
    def has_value_term(self) -> bool:
        """Whether the encoding adds a term to the attention output (Shaw's relative values)."""
        q_pos, k_pos = self.qk_positions(1, 1, None, None)
        return self.build().prepare(1, q_positions=q_pos, k_positions=k_pos).has_value_term

    def positions(self, positions: torch.Tensor | None) -> torch.Tensor | None:
        """The encoding's positions for 1D ``(t,)``/``(b, t)`` ones: unchanged, or on :attr:`axes` axes.

        Axis ``j`` gets ``(j + 1) * p``: a linear map, so that a common shift of the 1D positions is a
        common shift of every coordinate and the relative and composition properties keep their
        meaning; the coordinates differ per axis, so each axis' channels are exercised.
        """
        if positions is None or not self.axes:
            return positions
        return torch.stack([positions * (j + 1) for j in range(self.axes)], dim=-1)

    def qk_positions(
        self, q_len: int, k_len: int, q_positions: torch.Tensor | None, k_positions: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """1D query/key positions (``None``: the defaults) as the encoding reads them.

        Mapped by :meth:`positions`. For an entry with :attr:`grid_len` (default positions only for
        its grid), defaults at another length are made explicit as the library makes them (keys at
        ``0..tk-1``, queries the last ``tq`` of them), so that every test can use any length.
        """
        defaults_exist = self.grid_len is None or q_len == k_len == self.grid_len
        if not defaults_exist and (q_positions is None or k_positions is None):
            if k_positions is None:
                if q_positions is not None and q_len == k_len:
                    k_positions = q_positions
                else:
                    k_positions = torch.arange(k_len)
            if q_positions is None:
                q_positions = k_positions[..., k_len - q_len :] if q_len <= k_len else torch.arange(q_len)
        return self.positions(q_positions), self.positions(k_positions)


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
    # DeepSeek V4's rotated slice inside the head (its last channels there)
    Entry("rope-offset", "rope(rotary_dim=4, rotary_offset=2)", hooks=frozenset({"qk"})),
    # NanoChat's rotation by minus the angles
    Entry("rope-conjugate", "rope(conjugate=True)", hooks=frozenset({"qk"})),
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
    # --- relative positions with content, and learned functions of distance
    Entry("shaw", "shaw(max_distance=4)", hooks=frozenset({"bias"}), content=True),
    Entry(
        "shaw-values-per-head-asymmetric",
        "shaw(max_distance=3, max_distance_right=1, per_head=True, values=True)",
        dims={"causal": False},
        hooks=frozenset({"bias"}),
        content=True,
    ),
    # VITS's relative keys and values: nothing past the window
    Entry(
        "shaw-values-zero-beyond",
        "shaw(max_distance=2, values=True, beyond='zero')",
        dims={"causal": False},
        hooks=frozenset({"bias"}),
        content=True,
        variant=True,
    ),
    # xPos's key scale zeta ** (-n / 512) reaches float16's range near n = 4000 (|k| ~ 4)
    Entry(
        "xpos",
        "xpos",
        hooks=frozenset({"qk"}),
        causal_only=True,
        norm_preserving=False,
        position_limit=2048,
    ),
    Entry("kerple-log", "kerple", hooks=frozenset({"bias"})),
    Entry(
        "kerple-power-bidirectional",
        "kerple(kind='power')",
        dims={"causal": False},
        hooks=frozenset({"bias"}),
        variant=True,
    ),
    # FIRE normalises the distance by the query position (max(i, L)): not shift-invariant
    Entry("fire", "fire(init_threshold=64.0, mlp_width=8)", hooks=frozenset({"bias"}), relative=False),
    Entry(
        "fire-bidirectional",
        "fire(mlp_width=16, init_c=1.0)",
        dims={"causal": False},
        hooks=frozenset({"bias"}),
        relative=False,
        variant=True,
    ),
    # Llama 4's NoPE layers: queries scaled by their absolute position, keys untouched
    Entry(
        "query-temperature",
        "llama4_nope",
        hooks=frozenset({"qk"}),
        relative=False,
        norm_preserving=False,
        key_positions=False,
    ),
    # Beam's layers without RoPE: a power law of the query's position (its scale reaches 1.1 at 96 tokens)
    Entry(
        "query-temperature-power",
        "query_temperature(floor_scale=64, attn_scale=0.1, form='power')",
        hooks=frozenset({"qk"}),
        relative=False,
        norm_preserving=False,
        key_positions=False,
        variant=True,
    ),
    # --- positions with axes
    Entry("mrope", "mrope", hooks=frozenset({"qk"}), axes=3),
    Entry(
        "mrope-interleaved-yarn",
        "mrope(interleaved=True, scaling={'rope_type': 'yarn', 'factor': 2.0, 'original_max_position_embeddings': 64})",
        hooks=frozenset({"qk"}),
        axes=3,
        variant=True,
    ),
    # ERNIE 4.5 VL's sections: height and width alternating over neighbouring pairs, then time
    Entry(
        "mrope-hw",
        "mrope(mrope_section=[2, 1, 1], interleaved='hw', layout='interleaved')",
        hooks=frozenset({"qk"}),
        axes=3,
    ),
    # NeoMME's: rows and columns alternating over every rotated pair, no time axis, a partial rotation
    Entry(
        "mrope-hw-2axes-partial",
        "mrope(mrope_section=[1, 1], interleaved='hw', scaling={'rope_type': 'default', 'partial_rotary_factor': 0.5})",
        hooks=frozenset({"qk"}),
        axes=2,
        variant=True,
    ),
    Entry("rope-axial", "rope_axial(grid_size=(3, 4))", hooks=frozenset({"qk"}), axes=2, grid_len=12),
    # Gemma 4's vision tower: each axis's block of channels rotated on its own (another rotation path)
    Entry(
        "rope-axial-blocks-prefix",
        "rope_axial(grid_size=(2, 3), num_prefix_tokens=1, axis_layout='blocks')",
        hooks=frozenset({"qk"}),
        axes=2,
        grid_len=7,
    ),
    Entry(
        "rope2d-alternate-interleaved-prefix",
        "rope2d(grid_size=(2, 3), num_prefix_tokens=1, axis_layout='alternate', layout='interleaved')",
        hooks=frozenset({"qk"}),
        axes=2,
        grid_len=7,
        variant=True,
    ),
    Entry("learned2d", "learned2d(grid_size=(3, 4))", hooks=frozenset({"input"}), fixed_len=12),
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
        q_pos, k_pos = entry.qk_positions(length, length, None, None)
        if q_pos is not None and k_pos is not None:
            return module(q.to(device), k.to(device), q_pos.to(device), k_pos.to(device))
        return module(q.to(device), k.to(device))
    if module.kind == "bias":
        scores = torch.randn(batch, entry.num_heads, length, length, dtype=torch.float64).to(dtype)
        scores = scores.to(device)
        if not entry.content:
            return (module(scores),)
        q, k = (t.to(device) for t in make_qk(entry, batch, length, length, dtype))
        if not entry.has_value_term:
            return (module(scores, q),)
        # The drop-in forward refuses a value term (it changes the attention output, which a call
        # on the scores cannot reach): hand-written attention calls the two hooks instead.
        bias = module.attention_bias(q, k)
        scores = scores.to(bias.dtype) + bias
        probs = scores.softmax(-1).to(dtype)
        return scores.to(dtype), module.value_term(probs)
    return (module(make_input(entry, batch, length, dtype).to(device)),)


FLOAT_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
HALF_DTYPES = (torch.bfloat16, torch.float16)
