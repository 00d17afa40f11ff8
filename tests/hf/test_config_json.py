"""A ``config.json`` in the forms older transformers wrote, read as the model's config class reads it.

transformers 4 wrote ``rope_theta`` and ``rope_scaling`` at the top level (and no ``rope_parameters``); a
class of transformers 5 turns them into ``rope_parameters`` by its own rules: its default dict where the file
gives none (a top-level ``rope_theta`` then fills only what that leaves out), legacy keys of its own
(``rotary_emb_base``, ``rope_local_base_freq``...), a fixed head width, layer types it derives or renames. For
every model type with a rotary embedding: posenc's encoding of such a dict either is refused (ValueError) or
equals posenc's encoding of the config object the model's class makes of the same dict (which
tests/hf/test_zoo.py checks against the model's own code); their sliding windows likewise. The dicts are the tiny configs of the zoo survey, rewritten.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402

import posenc  # noqa: E402
from posenc.app.hf_zoo import FIT, ROTARY_VARIANT, TINY  # noqa: E402
from posenc.hf._read import _EMPTY_SCALING_WINS, ALIASES, class_defaults  # noqa: E402
from posenc.hf.configs import _FLAT_TEXT, _TEXT_TYPE  # noqa: E402

_ROPE_KEYS = ("rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor")


def _legacy_forms(config: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``config`` (a config object's to_dict()) rewritten: without RoPE fields, in transformers 4's form, and
    with a top-level field each, which some classes read and others do not."""
    bare = {k: v for k, v in config.items() if k not in _ROPE_KEYS}
    linear = {"rope_type": "linear", "factor": 2.0}
    yield "no RoPE fields", bare
    yield "no head_dim", {k: v for k, v in config.items() if k != "head_dim"}
    yield "rope_theta", {**bare, "rope_theta": 777.0}
    yield "partial_rotary_factor", {**bare, "rope_theta": 777.0, "partial_rotary_factor": 0.75}
    yield (
        "rope_scaling with type",
        {**bare, "rope_theta": 777.0, "rope_scaling": {"type": "linear", "factor": 2.0}},
    )
    yield (
        "rope_scaling with rope_theta",
        {**bare, "rope_theta": 777.0, "rope_scaling": {**linear, "rope_theta": 5.0}},
    )
    yield "flat rope_parameters", {**bare, "rope_parameters": {**linear, "rope_theta": 5.0}}
    yield "no layer_types", {k: v for k, v in config.items() if k != "layer_types"}
    yield "no sliding_window", {k: v for k, v in config.items() if k != "sliding_window"}
    old_names = {
        "full_attention": "attention",
        "linear_attention": "mamba",
        "indexed_attention": "deepseek_sparse_attention",
    }
    if config.get("layer_types"):
        yield (
            "old layer type names",
            {**config, "layer_types": [old_names.get(t, t) for t in config["layer_types"]]},
        )
        if {"full_attention", "sliding_attention"} <= set(
            config["layer_types"]
        ):  # (Gemma 4's kin force it full)
            yield (
                "last layer sliding",
                {**config, "layer_types": [*config["layer_types"][:-1], "sliding_attention"]},
            )
    params = config.get("rope_parameters")
    if isinstance(params, dict):  # (transformers keeps the null: its model cannot rotate by it)
        nested = any(isinstance(v, dict) for v in params.values())
        null = {k: {**v, "rope_theta": None} if isinstance(v, dict) else v for k, v in params.items()}
        yield (
            "rope_theta null in rope_parameters",
            {
                **config,
                "rope_theta": 777.0,
                "rope_parameters": null if nested else {**params, "rope_theta": None},
            },
        )
    if isinstance(params, dict) and not any(
        isinstance(v, dict) for v in params.values()
    ):  # one dict: v4's form
        flat = dict(params)
        top = {k: flat.pop(k) for k in ("rope_theta", "partial_rotary_factor") if k in flat}
        scaled = flat.get("rope_type", flat.get("type")) != "default"
        yield "transformers 4", {**bare, **top, "rope_scaling": flat if scaled else None}


def _tiny_configs() -> Iterator[tuple[str, type, dict[str, Any]]]:
    """(model_type, config class, its tiny config's to_dict()) for the model types posenc rotates by."""
    for model_type, config_class in CONFIG_MAPPING.items():
        fit = {k: v for k, v in FIT.items() if hasattr(config_class, k)}
        fit.update(ROTARY_VARIANT.get(model_type, {}))
        try:
            try:
                config = config_class(**{**TINY, **copy.deepcopy(fit)})
            except Exception:
                config = config_class(**copy.deepcopy(fit))
            if config.get_text_config() is not config:  # (parents: their text model's type is here too)
                continue
            encodings = posenc.hf.layer_encodings(config)
        except Exception:
            continue
        if any(isinstance(e, (posenc.RoPE, posenc.MRoPE, posenc.AxialRoPE)) for e in encodings):
            yield model_type, config_class, config.to_dict()


def _computed(encodings: list[posenc.PositionalEncoding]) -> list[Any]:
    """What each layer's encoding computes on fixed inputs (its class and head width, and the rotated q)."""
    out = []
    for enc in encodings:
        if isinstance(enc, (posenc.RoPE, posenc.MRoPE, posenc.AxialRoPE)):
            q = torch.randn(1, 2, 12, enc.head_dim, generator=torch.Generator().manual_seed(0))
            out.append((type(enc), enc.head_dim, enc.encode_qk(q, q)[0]))
        else:
            out.append((type(enc), repr(enc)))
    return out


def _same(ours: list[Any], theirs: list[Any]) -> bool:
    return len(ours) == len(theirs) and all(
        a[:2] == b[:2] and (len(a) == 2 or torch.allclose(a[2], b[2], atol=1e-5, rtol=1e-5))
        for a, b in zip(ours, theirs, strict=True)
    )


def test_a_config_json_in_any_form_gives_what_its_class_makes_of_it() -> None:
    """The encodings, and the sliding windows, of each form."""
    compared, differ = 0, []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model_type, config_class, config in _tiny_configs():
            for form, raw in _legacy_forms(config):
                try:
                    made = config_class.from_dict(copy.deepcopy(raw))
                except Exception:  # (its class refuses the dict: so does the model)
                    continue
                try:
                    ours = _computed(posenc.hf.layer_encodings(copy.deepcopy(raw)))
                except ValueError:
                    continue
                try:
                    theirs = _computed(posenc.hf.layer_encodings(made))
                except ValueError as err:  # converted from the dict, refused from the object
                    differ.append(f"{model_type}, {form}: the object is refused ({err})")
                    continue
                compared += 1
                if not _same(ours, theirs):
                    differ.append(
                        f"{model_type}, {form}: its class makes {getattr(made, 'rope_parameters', None)}"
                    )
                try:
                    windows = posenc.hf.layer_windows(copy.deepcopy(raw)), posenc.hf.layer_windows(made)
                except ValueError:
                    continue
                if windows[0] != windows[1]:
                    differ.append(f"{model_type}, {form}: windows {windows[0]}, its class's {windows[1]}")
    assert not differ, "\n".join(differ)
    assert compared >= 1000, compared  # (the zoo's tiny configs, each in several forms)


def test_a_parents_text_defaults_are_those_its_class_fills_a_text_config_dict_with() -> None:
    """Some parents' classes merge a text_config dict over defaults of their own (SubConfigSpec's init_kwargs),
    which a config.json's text_config may leave out: posenc's copy of those it reads; none for the others."""
    read = {"hidden_size", "num_attention_heads", "num_hidden_layers", "max_position_embeddings", "head_dim"}
    read |= {"rope_parameters", "rope_theta", "partial_rotary_factor", "sliding_window", "use_sliding_window"}
    for model_type, config_class in CONFIG_MAPPING.items():
        spec = (getattr(config_class, "sub_configs_defaults", None) or {}).get("text_config")
        given = {
            k: v for k, v in (getattr(spec, "init_kwargs", None) or {}).items() if k in read and v is not None
        }
        if given:
            bare = {"model_type": spec.model_type or spec.config_class.model_type}
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    made = config_class(text_config=bare).text_config.to_dict()
            except Exception:  # (its class refuses a bare text model: FunASR-Nano's sizes must agree)
                continue
            own = transformers.AutoConfig.for_model(bare["model_type"]).to_dict()
            if all(own.get(k) == v for k, v in given.items()):  # (the text model's own: merged or not alike)
                continue
            if any(made.get(k) != v for k, v in given.items() if "rope" not in k):  # (standardised apart)
                given = {}  # (its class takes a text_config dict as it is)
        assert class_defaults(f"{model_type}.text_config") == given, model_type


def _parents() -> Iterator[tuple[str, type, Any]]:
    """(model_type, config class, its text_config SubConfigSpec) of every parent the installed transformers knows."""
    for model_type, config_class in CONFIG_MAPPING.items():
        spec = (getattr(config_class, "sub_configs_defaults", None) or {}).get("text_config")
        if spec is not None:
            yield model_type, config_class, spec


def _encodings_or_refusal(config: Any) -> list[Any] | None:
    try:
        return _computed(posenc.hf.layer_encodings(config))
    except ValueError:
        return None


def test_a_parents_text_model_type_is_the_one_its_class_builds() -> None:
    """posenc's table of parents (a text_config dict that names no model_type is this text model) is transformers'."""
    theirs = {mt: spec.model_type or spec.config_class.model_type for mt, _, spec in _parents()}
    assert _TEXT_TYPE == theirs


def test_a_parent_without_text_config_or_its_model_type_gives_what_its_class_makes_of_it() -> None:
    """A text_config dict without model_type is the parent's default text model (Aya Vision's: Cohere 2's, NoPE
    layers and all). Without text_config, a parent's class builds its default text model and ignores text keys
    at its top level; the parents of ``_FLAT_TEXT`` read them. Either way posenc's encodings of the dict are
    those of the object its class makes of it, or a ValueError."""
    compared, differ = 0, []
    top = {"hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2, "num_hidden_layers": 3}
    top |= {"intermediate_size": 64, "head_dim": 32, "rope_theta": 777.0, "max_position_embeddings": 64}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model_type, config_class, _ in _parents():
            forms = {"text keys at the top level": {"model_type": model_type, **top}}
            try:
                full = config_class().to_dict()
                text = {k: v for k, v in full["text_config"].items() if k != "model_type"}
                if "max_position_embeddings" in text:  # (short: its class's 16,384-row tables took the time)
                    text["max_position_embeddings"] = 64
                forms["a text_config without model_type"] = {**full, "text_config": text}
            except Exception:  # (its class needs arguments: Gemma 4 assistant's)
                pass
            for form, raw in forms.items():
                try:
                    made = config_class.from_dict(copy.deepcopy(raw))
                except Exception:  # (its class refuses the dict: so does the model)
                    continue
                if form.startswith("text keys"):
                    flat = made.get_text_config().num_hidden_layers == top["num_hidden_layers"]
                    assert flat == (model_type in _FLAT_TEXT), model_type
                ours, theirs = _encodings_or_refusal(copy.deepcopy(raw)), _encodings_or_refusal(made)
                if ours is None or theirs is None:  # (refused: from the dict, or from the object as well)
                    continue
                compared += 1
                if not _same(ours, theirs):
                    differ.append(f"{model_type}, {form}")
    assert not differ, "\n".join(differ)
    assert compared >= 100, compared  # (of ~140 parents, the rest refused)


@pytest.mark.parametrize(
    ("model_type", "key"),
    [
        (
            "deepseek_ocr2_text",
            "head_dim",
        ),  # (its class: hidden_size // num_attention_heads, whatever is given)
        ("unlimited_ocr_text", "head_dim"),
        ("hy_v4_vl_text", "head_dim"),  # (its class: qk_rope_head_dim)
        ("cohere2", "head_dim"),  # (its class keeps a head_dim given ...)
        ("cohere2", "kv_channels"),  # (... and never reads kv_channels)
    ],
)
def test_a_head_width_given_is_read_as_its_class_reads_it(model_type: str, key: str) -> None:
    config_class = CONFIG_MAPPING[model_type]
    sizes = {"hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2, "num_hidden_layers": 2}
    raw = {**config_class(**sizes).to_dict(), key: 8}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        made = config_class.from_dict(copy.deepcopy(raw))
    ours, theirs = posenc.hf.layer_encodings(raw), posenc.hf.layer_encodings(made)
    assert [e.head_dim for e in ours] == [e.head_dim for e in theirs]


@pytest.mark.parametrize("model_type", sorted(_EMPTY_SCALING_WINS))
def test_an_empty_rope_scaling_is_the_rope_parameters_of_the_classes_that_take_it(model_type: str) -> None:
    """Their classes take ``"rope_scaling": {}`` as their rope_parameters (not their own per-type dict) and then
    read the top-level rope_theta; posenc filled in the class's dict (Mellum: base 5e5 instead of 777)."""
    config_class = CONFIG_MAPPING[model_type]
    sizes = {"hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2, "num_hidden_layers": 2}
    raw = {k: v for k, v in config_class(**sizes).to_dict().items() if k not in _ROPE_KEYS}
    raw |= {"rope_theta": 777.0, "rope_scaling": {}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        made = config_class.from_dict(copy.deepcopy(raw))
    assert made.rope_parameters == {}
    assert _same(_computed(posenc.hf.layer_encodings(raw)), _computed(posenc.hf.layer_encodings(made)))


def _mapped_aliases() -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """(model_type, standard name, the name its class keeps it under, a tiny config's to_dict()) for every class
    whose attribute_map reads a standard name of posenc's ALIASES under another."""
    for model_type, config_class in CONFIG_MAPPING.items():
        for name, kept in (getattr(config_class, "attribute_map", None) or {}).items():
            if kept in ALIASES.get(name, ()):
                try:
                    yield model_type, name, kept, config_class().to_dict()
                except Exception:  # (its class needs arguments)
                    continue


def test_a_null_standard_name_beside_the_name_its_class_keeps_is_refused() -> None:
    """``"sliding_window": null`` beside RecurrentGemma's ``attention_window_size`` (JetMoE's ``head_dim`` beside
    ``kv_channels``...): the class sets the kept attribute to the null. posenc read the kept value."""
    seen = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model_type, name, kept, config in _mapped_aliases():
            if config.get(kept) is None:
                continue
            raw = {**config, name: None}
            try:
                made = CONFIG_MAPPING[model_type].from_dict(copy.deepcopy(raw))
            except Exception:  # (its class refuses the null: StrictDataclassClassValidationError...)
                made = None
            assert made is None or getattr(made, kept) is None, model_type
            with pytest.raises(ValueError, match=f"'{name}' is null beside '{kept}'"):
                posenc.hf.layer_encodings(raw)
            seen.add((model_type, name))
    assert {("recurrent_gemma", "sliding_window"), ("jetmoe", "head_dim"), ("gpt2", "hidden_size")} <= seen
