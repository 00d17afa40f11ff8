"""The registry: names, aliases, spec parsing, dims, and the errors users see."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Optional

import pytest
import torch

import posenc
from posenc import registry
from posenc.registry import DIM_NAMES, describe, lookup, parse_spec, registered, unregister

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
        ("rope(bse=1.0)", ValueError, r"unknown option\(s\) 'bse'.*RoPE accepts: head_dim, base="),
        ("rope(base='big')", TypeError, r"base='big'.*expected float"),
        ("rope(layout='split')", ValueError, r"layout='split' is not one of \['half', 'interleaved'\]$"),
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


class ScaledNoPE(posenc.PositionalEncoding):
    """A user encoding for these tests; registered only inside ``registered(...)`` blocks."""

    def __init__(self, d_model: int, scale: float = 1.0) -> None:
        super().__init__()
        self.d_model, self.scale = d_model, scale

    def encode_input(self, x, positions=None):
        return x * self.scale


class RoPE(posenc.PositionalEncoding):
    """A user class that happens to share posenc's class name."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()


def test_register_a_user_encoding_and_build_it():
    with registered(ScaledNoPE, "test_scaled_nope", "test_scaled_nope_alias"):
        pe = posenc.build("test_scaled_nope_alias(scale=2.0)", d_model=8, num_heads=2)
        assert isinstance(pe, ScaledNoPE) and pe.scale == 2.0 and pe.d_model == 8
        assert "test_scaled_nope" in posenc.available()
        x = torch.randn(1, 3, 8)
        torch.testing.assert_close(pe.encode_input(x), 2 * x)
        assert describe("test_scaled_nope")["aliases"] == ["test_scaled_nope_alias"]
        assert ScaledNoPE.registry_name == "test_scaled_nope"
    assert "test_scaled_nope" not in posenc.available()
    assert "test_scaled_nope_alias" not in posenc.available()
    assert "registry_name" not in ScaledNoPE.__dict__


def test_registered_undoes_its_registration_when_the_block_raises():
    with pytest.raises(RuntimeError, match="boom"), registered(ScaledNoPE, "test_scaled_nope"):
        raise RuntimeError("boom")
    assert "test_scaled_nope" not in posenc.available()


def test_registered_checks_its_names_as_register_does():
    with (
        pytest.raises(ValueError, match="a name must be a Python identifier, got 5"),
        registered(ScaledNoPE, 5),
    ):
        pass  # an int name was an AttributeError from str.lower


def test_the_decorator_and_unregister_pair_up():
    decorated = posenc.register("test_scaled_nope", "test_scaled_nope_alias")(ScaledNoPE)
    try:
        assert decorated is ScaledNoPE and lookup("test_scaled_nope_alias") is ScaledNoPE
    finally:
        assert unregister("test_scaled_nope_alias") is ScaledNoPE  # an alias removes every name
    assert not {"test_scaled_nope", "test_scaled_nope_alias"} & set(posenc.available())
    assert ScaledNoPE.registry_name is None
    with pytest.raises(ValueError, match="unknown position encoding 'test_scaled_nope'"):
        unregister("test_scaled_nope")


def test_registering_the_same_class_again_is_a_no_op():
    before = posenc.available()
    posenc.register("rope", "rotary")(posenc.RoPE)
    posenc.register("ROTARY")(posenc.RoPE)
    assert posenc.available() == before
    assert describe("rotary")["name"] == "rope" and posenc.RoPE.registry_name == "rope"


@pytest.mark.parametrize("name", ["rope", "rotary", "RoPE"])
def test_a_different_class_under_a_taken_name_or_alias_raises_and_changes_nothing(name):
    before = posenc.available()
    with pytest.raises(ValueError) as info:
        posenc.register("test_free_name", name)(RoPE)
    message = str(info.value)
    assert "'rope'" in message or "'rotary'" in message
    assert "posenc.encodings.rope.RoPE" in message and "test_registry" in message
    assert "unregister(" in message
    assert posenc.available() == before
    assert lookup("rope") is posenc.RoPE and lookup("rotary") is posenc.RoPE
    assert type(posenc.build("rotary", head_dim=16)) is posenc.RoPE


def test_unregister_then_register_replaces_every_name_and_registered_restores_them():
    """Replacing a built-in: unregister it (all its names go), register the new class under them."""
    unregister("rope")
    try:
        with registered(RoPE, "rope", "rotary"):
            assert lookup("rope") is RoPE and lookup("rotary") is RoPE  # never two classes for one encoding
            assert describe("rope")["aliases"] == ["rotary"] and RoPE.registry_name == "rope"
        assert "rope" not in posenc.available() and "registry_name" not in RoPE.__dict__
    finally:
        posenc.register("rope", "rotary")(posenc.RoPE)
    assert lookup("rotary") is posenc.RoPE and describe("rotary")["name"] == "rope"


def test_register_refuses_non_encodings_and_non_identifiers():
    with pytest.raises(TypeError, match="PositionalEncoding subclasses"):
        posenc.register("test_not_a_module")(int)
    with pytest.raises(ValueError, match="identifier"):
        posenc.register("not a name")
    assert "test_not_a_module" not in posenc.available()


# --- option types ----------------------------------------------------------------------------------


class Typed(posenc.PositionalEncoding):
    """Options of every annotation shape the registry checks."""

    def __init__(
        self,
        d_model: int,
        ints: list[int] | None = None,
        floats: tuple[float, ...] = (),
        pair: tuple[int, int] = (1, 2),
        seq: Sequence[int] = (),
        table: dict[str, Any] | None = None,
        nested: dict[str, list[float]] | None = None,
        mode: Literal["a", "b"] | None = None,
        scale: float = 1.0,
        count: Optional[int] = None,  # noqa: UP045 - the old spelling is checked too
        flag: bool = False,
    ) -> None:
        super().__init__()
        self.options = dict(ints=ints, floats=floats, pair=pair, seq=seq, table=table, nested=nested)


@pytest.fixture
def typed():
    with registered(Typed, "test_typed"):
        yield


@pytest.mark.parametrize(
    "options",
    [
        {"ints": [1, 2]},
        {"ints": None},
        {"floats": (1, 2.5)},  # ints where a float is declared
        {"pair": (3, 4)},
        {"seq": [1, 2]},
        {"seq": (1, 2)},
        {"table": {"rope_type": "yarn", "factor": 4.0}},
        {"nested": {"a": [1.0, 2]}},
        {"mode": "b"},
        {"mode": None},
        {"scale": 2},
        {"count": None},
        {"flag": True},
    ],
)
def test_well_typed_options_are_accepted(typed, options):
    posenc.build({"name": "test_typed", **options}, d_model=4)


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({"ints": [1, "2"]}, r"ints\[1\]='2'.*expected int"),
        ({"ints": [1, True]}, r"ints\[1\]=True.*expected int"),
        ({"ints": (1, 2)}, r"ints=\(1, 2\).*expected list\[int\] \| None"),
        ({"floats": (1.0, "x")}, r"floats\[1\]='x'.*expected float"),
        ({"floats": (1.0, False)}, r"floats\[1\]=False.*expected float"),
        ({"floats": [1.0]}, r"floats=\[1.0\].*expected tuple\[float, ...\]"),
        ({"pair": (1, 2, 3)}, r"pair=\(1, 2, 3\).*a tuple of 2"),
        ({"pair": (1, 2.0)}, r"pair\[1\]=2.0.*expected int"),
        ({"seq": "12"}, r"seq='12'.*expected Sequence\[int\]"),
        ({"seq": [1, None]}, r"seq\[1\]=None.*expected int"),
        ({"table": {1: "x"}}, r"table key=1.*expected str"),
        ({"table": [("a", 1)]}, r"table=.*expected dict\[str, Any\] \| None"),
        ({"nested": {"a": [1.0, "x"]}}, r"nested\['a'\]\[1\]='x'.*expected float"),
        ({"mode": 1}, r"mode=1.*one of \['a', 'b'\]"),
        ({"scale": True}, r"scale=True.*expected float"),
        ({"count": 1.0}, r"count=1.0.*expected Optional\[int\]"),
        ({"count": False}, r"count=False"),
        ({"flag": 1}, r"flag=1.*expected bool"),
    ],
)
def test_ill_typed_options_name_the_element_and_the_expected_type(typed, options, pattern):
    with pytest.raises(TypeError, match=pattern):
        posenc.build({"name": "test_typed", **options}, d_model=4)


def test_a_value_of_the_right_type_outside_the_accepted_ones_is_a_value_error(typed):
    """A str where the strs 'a' and 'b' are accepted is a wrong value, not a wrong type (``rope(layout='split')``
    was a TypeError saying "has the wrong type"); where a bool is accepted too, the message lists every value."""
    with pytest.raises(ValueError, match=r"option mode='c' is not one of \['a', 'b'\]$"):
        posenc.build({"name": "test_typed", "mode": "c"}, d_model=4)
    with pytest.raises(ValueError, match=r"option values='share' is not one of \['shared', False, True\]$"):
        posenc.build("shaw(values='share')", head_dim=8, num_heads=2)


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({"scale": 10**400}, r"scale=an int of 401 digits is too large for a float"),
        ({"floats": (1.0, 10**400)}, r"floats\[1\]=.*too large for a float"),
        ({"nested": {"a": [float("nan")]}}, r"nested\['a'\]\[0\]=nan must be finite"),
        ({"scale": float("-inf")}, r"scale=-inf must be finite"),
    ],
)
def test_numbers_a_float_cannot_hold_raise_value_errors(typed, options, pattern):
    with pytest.raises(ValueError, match=pattern):
        posenc.build({"name": "test_typed", **options}, d_model=4)


def test_an_annotation_the_checker_cannot_resolve_is_left_to_the_constructor():
    class Unresolvable(posenc.PositionalEncoding):
        def __init__(self, d_model: int, thing: NotDefinedAnywhere = None) -> None:  # noqa: F821
            super().__init__()
            self.thing = thing

    with registered(Unresolvable, "test_unresolvable"):
        assert posenc.build("test_unresolvable(thing=3)", d_model=4).thing == 3
        with pytest.raises(TypeError, match=r"d_model='4'.*expected int"):  # the others are still checked
            posenc.build("test_unresolvable(d_model='4')")


# --- hostile spec strings ---------------------------------------------------------------------------


def test_an_option_given_twice_raises():
    with pytest.raises(ValueError, match="option 'base' is given more than once"):
        posenc.build("rope(base=1.0, base=2.0)", head_dim=16)


@pytest.mark.parametrize(
    ("spec", "pattern"),
    [
        ("rope(scaling=" + "[" * 10000 + "]" * 10000 + ")", r"nests brackets 10001 deep; the limit is 20"),
        ("rope(scaling=" + "{'a': " * 50 + "1" + "}" * 50 + ")", r"nests brackets 51 deep"),
        ("rope(base=" + "-" * 90000 + "1.0)", r"nested too deeply"),  # no brackets, deep unary chain
        ("rope(base=" + "1+" * 40000 + "1)", r"nested too deeply"),
        ("rope(base=" + "1+" * 900 + "1)", r"must be a Python literal"),  # literal_eval and unparse recurse
        ("rope(base=" + "1" * 200_000 + ")", r"is too long: 200011 characters, the limit is 100000"),
        ("rope(base=" + "1" * 5000 + ")", r"cannot parse|too large for a float"),  # int digit limit: 3.11+
        ("rope(scaling={[1]: 2})", r"must be a Python literal"),
    ],
)
def test_hostile_specs_give_short_value_errors(spec, pattern):
    with pytest.raises(ValueError, match=pattern) as info:
        posenc.build(spec, head_dim=16)
    assert len(str(info.value)) < 600, "the message must not echo the whole input"


def test_brackets_inside_strings_do_not_count_as_nesting():
    _, options = parse_spec("rope(scaling={'rope_type': '" + "[" * 50 + "'})")
    assert options == {"scaling": {"rope_type": "[" * 50}}


def test_a_huge_integer_where_a_float_is_expected_is_a_value_error():
    with pytest.raises(ValueError, match=r"base=an int of 400 digits is too large for a float"):
        posenc.build("rope(base=" + "9" * 400 + ")", head_dim=16)
    with pytest.raises(ValueError, match="base"):
        posenc.RoPE(16, base=10**400)  # the constructors' own check, too


@pytest.mark.parametrize(
    "spec",
    [
        "x" * 10_000,
        {"name": "x" * 10_000},
        "rope(" + "b" * 10_000 + "=1)",
        "rope(base='" + "x" * 10_000 + "')",
        {"name": "rope", "scaling": "[" * 10_000},
    ],
)
def test_error_messages_do_not_echo_huge_inputs(spec):
    with pytest.raises((TypeError, ValueError)) as info:
        posenc.build(spec, head_dim=16)
    assert len(str(info.value)) < 600


def test_spec_is_the_type_build_accepts():
    assert typing.get_type_hints(posenc.build)["spec"] == registry.Spec
    assert set(typing.get_args(registry.Spec)) == {str, Mapping[str, Any], posenc.PositionalEncoding}


def test_lookup_and_describe_read_the_constructor():
    assert lookup("rotary") is posenc.RoPE
    info = describe("rope")
    assert info["name"] == "rope" and info["aliases"] == ["rotary"] and info["kind"] == "rotary"
    options = {o["name"]: o for o in info["options"]}
    assert options["head_dim"]["required"] and options["head_dim"]["is_dim"]
    assert options["base"]["default"] == inspect.signature(posenc.RoPE).parameters["base"].default
    assert options["layout"]["choices"] == ["half", "interleaved"]
    assert set(DIM_NAMES) >= {o["name"] for o in info["options"] if o["is_dim"]}


@pytest.mark.parametrize("name", ["sinusoidal", "sinusoidal2d", "learned", "rope", "t5", "alibi", "none"])
def test_every_registered_encoding_is_documented_and_has_a_kind(name):
    info = describe(name)
    assert info["doc"], f"{name} has no docstring"
    assert info["kind"] in ("additive", "rotary", "bias", "none")
