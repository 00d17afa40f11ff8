"""The registry: names, aliases, spec parsing, dims, and the errors users see."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.registry import DIM_NAMES, describe, lookup, parse_spec

EXPECTED_NAMES = {
    "sinusoidal": posenc.Sinusoidal,
    "sincos": posenc.Sinusoidal,
    "sinusoidal2d": posenc.Sinusoidal2D,
    "learned": posenc.Learned,
    "rope": posenc.RoPE,
    "rotary": posenc.RoPE,
    "relative_bias": posenc.RelativeBias,
    "t5": posenc.RelativeBias,
    "alibi": posenc.ALiBi,
    "none": posenc.NoPE,
    "nope": posenc.NoPE,
}

ALL_DIMS = dict(d_model=64, num_heads=4, head_dim=16, max_len=128, causal=True)


def test_available_lists_every_name_and_alias():
    assert set(EXPECTED_NAMES) <= set(posenc.available())
    assert posenc.available() == sorted(posenc.available())


@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES))
def test_build_by_name_gives_the_registered_class(name):
    pe = posenc.build(name, **ALL_DIMS)
    assert type(pe) is EXPECTED_NAMES[name]
    assert isinstance(pe, posenc.PositionalEncoding)


def test_build_is_case_and_space_insensitive_for_names():
    assert type(posenc.build("  RoPE ", head_dim=16)) is posenc.RoPE


def test_build_returns_a_built_module_as_is():
    pe = posenc.NoPE()
    assert posenc.build(pe, d_model=3) is pe


def test_call_string_and_dict_give_the_same_options():
    from_string = posenc.build("rope(base=500000.0, layout='interleaved')", head_dim=32)
    from_dict = posenc.build({"name": "rope", "base": 500000.0, "layout": "interleaved"}, head_dim=32)
    for pe in (from_string, from_dict):
        assert pe.base == 500000.0
        assert pe.layout == "interleaved"
        assert pe.head_dim == 32


def test_nested_literal_options_are_parsed():
    name, options = parse_spec("rope(scaling={'rope_type': 'yarn', 'factor': 4.0}, rotary_dim=None)")
    assert name == "rope"
    assert options == {"scaling": {"rope_type": "yarn", "factor": 4.0}, "rotary_dim": None}


def test_spec_options_win_over_dims():
    pe = posenc.build("alibi(causal=False)", num_heads=4, causal=True)
    assert pe.causal is False


def test_dims_follow_the_model_when_the_spec_is_silent():
    assert posenc.build("alibi", num_heads=4, causal=False).causal is False
    assert posenc.build("t5", num_heads=4, causal=True).bidirectional is False
    assert posenc.build("t5", num_heads=4, causal=False).bidirectional is True


def test_dims_an_encoding_does_not_declare_are_ignored():
    pe = posenc.build("none", **ALL_DIMS)
    assert isinstance(pe, posenc.NoPE)


def test_int_is_accepted_where_a_float_is_expected():
    assert posenc.build("rope(base=500000)", head_dim=16).base == 500000


def test_parse_spec_never_evaluates_code(tmp_path):
    marker = tmp_path / "pwned"
    spec = f"rope(base=__import__('pathlib').Path({str(marker)!r}).touch())"
    with pytest.raises(ValueError, match="literal"):
        posenc.build(spec, head_dim=16)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("spec", "error", "pattern"),
    [
        (
            "ropee",
            ValueError,
            r"unknown position encoding 'ropee'.*Did you mean 'rope'.*Known encodings: .*alibi",
        ),
        ("rope(bse=1.0)", ValueError, r"unknown option\(s\) 'bse'.*accepts: head_dim, base=10000.0"),
        ("rope(base='big')", TypeError, r"base='big'.*expected float"),
        ("rope(layout='split')", TypeError, r"layout='split'.*one of \['half', 'interleaved'\]"),
        ("rope(rotary_dim=True)", TypeError, r"rotary_dim=True"),
        ("rope(10000.0)", ValueError, r"keyword"),
        ("rope(**opts)", ValueError, r"\*\*"),
        ("rope(base=1e999)", ValueError, r"finite"),
        ("rope(", ValueError, r"cannot parse"),
        ("rope.x", ValueError, r"must be a name"),
        ({"base": 1.0}, ValueError, r"'name' key"),
        ({"name": 3}, TypeError, r"'name'.*string"),
        (3.5, TypeError, r"spec must be"),
    ],
)
def test_bad_specs_raise_clear_errors(spec, error, pattern):
    with pytest.raises(error, match=pattern):
        posenc.build(spec, head_dim=16)


def test_missing_required_size_is_named():
    with pytest.raises(ValueError, match=r"missing required size\(s\) head_dim"):
        posenc.build("rope")


def test_unknown_dim_names_are_rejected():
    with pytest.raises(ValueError, match=r"unknown model size\(s\) \['hidden'\]"):
        posenc.build("rope", head_dim=16, hidden=3)


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made by a test stay out of the registry other tests see."""
    from posenc import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_CANONICAL", dict(registry._CANONICAL))


def test_register_a_user_encoding_and_build_it(scratch_registry):
    @posenc.register("test_scaled_nope", "test_scaled_nope_alias")
    class ScaledNoPE(posenc.PositionalEncoding):
        def __init__(self, d_model: int, scale: float = 1.0) -> None:
            super().__init__()
            self.d_model, self.scale = d_model, scale

        def encode_input(self, x, positions=None):
            return x * self.scale

    pe = posenc.build("test_scaled_nope_alias(scale=2.0)", d_model=8, num_heads=2)
    assert isinstance(pe, ScaledNoPE) and pe.scale == 2.0 and pe.d_model == 8
    assert "test_scaled_nope" in posenc.available()
    x = torch.randn(1, 3, 8)
    torch.testing.assert_close(pe.encode_input(x), 2 * x)
    assert describe("test_scaled_nope")["aliases"] == ["test_scaled_nope_alias"]


def test_register_refuses_a_taken_name_and_non_encodings(scratch_registry):
    with pytest.raises(ValueError, match="already taken"):

        @posenc.register("rope")
        class Other(posenc.PositionalEncoding):
            pass

    with pytest.raises(TypeError, match="PositionalEncoding subclasses"):
        posenc.register("test_not_a_module")(int)
    with pytest.raises(ValueError, match="identifier"):
        posenc.register("not a name")


def test_lookup_and_describe_read_the_constructor():
    assert lookup("rotary") is posenc.RoPE
    info = describe("rope")
    assert info["name"] == "rope" and info["aliases"] == ["rotary"] and info["kind"] == "rotary"
    options = {o["name"]: o for o in info["options"]}
    assert options["head_dim"]["required"] and options["head_dim"]["is_dim"]
    assert options["base"]["default"] == 10000.0
    assert options["layout"]["choices"] == ["half", "interleaved"]
    assert set(DIM_NAMES) >= {o["name"] for o in info["options"] if o["is_dim"]}


@pytest.mark.parametrize("name", ["sinusoidal", "sinusoidal2d", "learned", "rope", "t5", "alibi", "none"])
def test_every_registered_encoding_is_documented_and_has_a_kind(name):
    info = describe(name)
    assert info["doc"], f"{name} has no docstring"
    assert info["kind"] in ("additive", "rotary", "bias", "none")
