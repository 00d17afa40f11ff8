"""Every installed transformers model type with a text rotary embedding, checked against posenc.

The survey itself (tiny configs, the model's own rotary module and apply function against posenc's
encoding of each layer type) lives in :mod:`posenc.app.hf_zoo`, which ``posenc models`` also prints;
this test fails on any mismatch and keeps the committed report, docs/hf_coverage.md, current.

Outcomes: matched; refused (posenc raised ValueError, naming the field); mismatched (fails the
test); not built (the tiny config or the rotary module could not be made, with the reason); no rotary of
its own (a tower or VQ model beside the text model whose model builds no rotary module: listed apart).
"""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402

import posenc  # noqa: E402
from posenc.app.hf_zoo import ROTARY_VARIANT, SCALINGS, report, survey  # noqa: E402

#: The committed coverage report, docs/hf_coverage.md: `python tests/hf/test_zoo.py` writes it.
REPORT = Path(__file__).resolve().parents[2] / "docs" / "hf_coverage.md"


def test_every_model_with_a_text_rotary_embedding() -> None:
    """The zoo at each class's default rope type, then with each of SCALINGS in every text config's RoPE dict (the
    frequencies and attention factor each model's own rotary computes from it, by rule and by table)."""
    results = survey()
    scaled = {name: survey(rope=rope) for name, rope in SCALINGS.items()}
    text = report(results, scaled)
    print(text)
    for found in (results, *scaled.values()):
        mismatched = {t: d for t, (o, d) in found.items() if o == "mismatched"}
        assert not mismatched, mismatched
        assert Counter(o for o, _ in found.values())["matched"] >= 250
    for (
        name,
        found,
    ) in scaled.items():  # (the dict reached the configs: models that take the default alone say so)
        assert any(name in detail for outcome, detail in found.values() if outcome != "matched"), name
    for model_type, (outcome, detail) in results.items():
        if outcome == "refused":
            assert "'" in detail or "=" in detail, (model_type, detail)  # names the field(s) at fault
    counts = Counter(outcome for outcome, _ in results.values())
    assert counts["matched"] >= 100
    if f"transformers {transformers.__version__} " in REPORT.read_text(encoding="utf-8"):
        assert text == REPORT.read_text(encoding="utf-8"), f"{REPORT} is stale: python tests/hf/test_zoo.py"


@pytest.mark.parametrize(
    ("model_type", "outcome", "detail"),
    [
        ("dots3_note_audio_encoder", "matched", "rule"),  # its own rotary (Dots3NoteAudioRotaryEmbedding)
        # only a tower's rotary in its module (PeAudioEncoderRotaryEmbedding), which posenc converts by rule:
        # neighbouring pairs (its stack_freqs; posenc gave the half layout, unchecked)
        ("pe_audio_encoder", "matched", "rule"),
        ("eomt_dinov3", "matched", "table"),  # DINOv3's rotary, forward(pixel_values), per patch
        ("gemma3n_audio", "no rotary of its own", "its model (Gemma3nAudioEncoder) builds no rotary module"),
        ("moshi_depth", "no rotary of its own", "its model (MoshiDepthDecoder) builds no rotary module"),
        (
            "nemotron3_diarization",
            "no rotary of its own",
            "sub-models with rows of their own: `nemotron3_diarization_audio`",
        ),
        (
            "gemma3n_vision",
            "not built",
            "Gemma3nRotaryEmbedding(config)",
        ),  # (timm's MobileNet, another module)
    ],
)
def test_towers_beside_a_text_model_are_checked_with_their_own_model(model_type, outcome, detail) -> None:
    found = survey([model_type])[model_type]
    assert found[0] == outcome and detail in found[1], found


#: Two fields most models' code does not read, with what posenc would otherwise get wrong
_PARTIAL = {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}}
_INTERLEAVE = {"rope_interleave": True}


@pytest.mark.parametrize(
    ("model_type", "field", "reads_it"),
    [
        *[(model_type, _PARTIAL, False) for model_type in ("llama", "qwen2", "olmo2", "mistral")],
        *[(model_type, _PARTIAL, True) for model_type in ("phi", "glm", "qwen3_next", "stablelm")],
        *[(model_type, _INTERLEAVE, False) for model_type in ("llama", "qwen3", "minicpm3")],
        *[(model_type, _INTERLEAVE, True) for model_type in ("deepseek_v3", "youtu")],
    ],
)
def test_fields_are_read_only_where_the_models_code_reads_them(monkeypatch, model_type, field, reads_it):
    # Llama's code (and that of most models) rotates whole heads in halves whatever partial_rotary_factor and
    # rope_interleave say: following them there would be a silent wrong result, so posenc refuses them
    monkeypatch.setitem(ROTARY_VARIANT, model_type, {**ROTARY_VARIANT.get(model_type, {}), **field})
    outcome, detail = survey([model_type])[model_type]
    if reads_it:
        assert outcome == "matched", detail
    else:
        named = "partial_rotary_factor=0.5" if field is _PARTIAL else "rope_interleave=True"
        assert (
            outcome == "refused" and named in detail and "not among the models whose code reads it" in detail
        )


def _without_partial(model_type: str) -> dict:
    """The class default's rope dict of each layer type (or rope kind), without its partial_rotary_factor."""
    params = CONFIG_MAPPING[model_type]().rope_parameters
    return {
        name: {k: v for k, v in one.items() if k != "partial_rotary_factor"} for name, one in params.items()
    }


@pytest.mark.parametrize("model_type", ["mellum", "laguna", "zaya", "mimo_v2_flash"])
@pytest.mark.parametrize("top", [None, 0.5])
def test_a_layer_types_dict_without_its_partial_factor_rotates_as_the_models_code(
    monkeypatch, model_type, top
):
    """Their code reads partial_rotary_factor from each layer type's dict alone (where absent: 1.0, MiMo V2
    Flash's own 0.334) and their classes copy no top-level one into a nested dict they are given, but a scaled
    rope type's init copies the top-level one into every dict first. Dicts all unscaled, or all scaled, rotate
    as the model; mixed, its rotary module's first pass and its weight init read it apart: refused."""
    unscaled = _without_partial(model_type)
    scaled = {name: {**one, "rope_type": "linear", "factor": 2.0} for name, one in unscaled.items()}
    variant = ROTARY_VARIANT.get(model_type, {})
    for params in (unscaled, scaled):
        # (a copy: transformers' rope init writes into the dicts it is given)
        monkeypatch.setitem(ROTARY_VARIANT, model_type, {**variant, "rope_parameters": copy.deepcopy(params)})
        if top is not None:
            ROTARY_VARIANT[model_type]["partial_rotary_factor"] = top
        outcome, detail = survey([model_type])[model_type]
        assert outcome == "matched", detail
    last = list(unscaled)[-1]  # (scaled; the other read too: a layer of each type)
    config = {
        **CONFIG_MAPPING[model_type]().to_dict(),
        "rope_parameters": {**unscaled, last: scaled[last]},
        "num_hidden_layers": 2,
        "layer_types": list(unscaled),
    }
    if top is not None:
        config["partial_rotary_factor"] = top
    if top is None:
        assert posenc.hf.layer_encodings(config)
    else:
        with pytest.raises(ValueError, match="has no partial_rotary_factor"):
            posenc.hf.layer_encodings(config)


@pytest.mark.parametrize("model_type", ["gemma3_text", "olmo3", "modernbert"])
def test_a_top_level_original_length_is_not_read_into_a_layer_types_dict(monkeypatch, model_type):
    """transformers reads a top-level original_max_position_embeddings into a flat rope dict only (Phi-3's
    rule); a layer type's dict keeps its own, else max_position_embeddings (posenc read the top-level one)."""
    original = "original_max_position_embeddings"
    own = {
        name: {**one, "rope_type": "yarn", "factor": 4.0}
        for name, one in CONFIG_MAPPING[model_type]().rope_parameters.items()
    }
    variant = {**ROTARY_VARIANT.get(model_type, {}), original: 24}
    for dicts in (
        own,
        {name: {**one, original: 16} for name, one in own.items()},
    ):  # (absent: the trained length)
        monkeypatch.setitem(ROTARY_VARIANT, model_type, {**variant, "rope_parameters": copy.deepcopy(dicts)})
        outcome, detail = survey([model_type])[model_type]
        assert outcome == "matched", detail


@pytest.mark.parametrize("truncate", [True, False])
def test_yarns_truncate_in_a_layer_types_dict_is_refused_where_the_model_does_not_read_it(
    monkeypatch, truncate
):
    """transformers' YaRN reads truncate from the config's whole rope_parameters, not from a layer type's dict:
    dots3 Note (whose class nests a flat dict per layer type) truncates whatever its dicts say. True: matched;
    False: refused, naming it, by table (dots3 Note, Gemma 3) and by rule (MiMo V2 Flash)."""
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "rope_theta": 500.0}
    params = {**yarn, "truncate": truncate}
    monkeypatch.setitem(
        ROTARY_VARIANT, "dots3_note_text", {"num_hidden_layers": 4, "rope_parameters": params}
    )
    outcome, detail = survey(["dots3_note_text"])["dots3_note_text"]
    if truncate:
        assert outcome == "matched", detail
    else:
        assert outcome == "refused" and "truncate=False" in detail, detail
    for model_type in ("gemma3_text", "mimo_v2_flash"):
        config = CONFIG_MAPPING[model_type]().to_dict()
        nested = {name: {**one, **params} for name, one in config["rope_parameters"].items()}
        if truncate:
            assert posenc.hf.layer_encodings({**config, "rope_parameters": nested})
        else:
            with pytest.raises(ValueError, match=r"_attention'\] has truncate=False"):
                posenc.hf.layer_encodings({**config, "rope_parameters": nested})


def test_a_deepseek_v4_rope_dict_without_its_partial_factor_is_refused():
    """DeepSeek V4's class writes a top-level partial_rotary_factor into its two dicts only when one is given, and
    its code otherwise reads 1.0 (the class's 64 / 512 where a scaled init copies it in first): the config object
    it builds, and its to_dict(), carry the top-level one either way, so neither tells which."""
    config = CONFIG_MAPPING["deepseek_v4"]().to_dict()
    for kind in ("main", "compress"):
        params = {**config["rope_parameters"], kind: _without_partial("deepseek_v4")[kind]}
        with pytest.raises(ValueError, match=rf"rope_parameters\['{kind}'\] has no partial_rotary_factor"):
            posenc.hf.layer_encodings({**config, "rope_parameters": params})


def _with(variant: dict, field: dict) -> dict:
    """A model type's tiny-config variant with ``field`` added (``rope_parameters``: merged into each dict)."""
    extra, old = field.get("rope_parameters"), variant.get("rope_parameters")
    if extra is None:
        merged = old
    elif isinstance(old, dict) and any(isinstance(v, dict) for v in old.values()):  # one dict per layer type
        merged = {k: v if v is None else {**v, **extra} for k, v in old.items()}
    else:
        merged = {**(old or {}), **extra}
    return {**variant, **field} | ({} if merged is None else {"rope_parameters": merged})


#: Each scaling type, and a rope_theta in every config: the towers and encoders whose class has no RoPE field
#: do not read it (a config object says so: refused). Not "dynamic": the survey rotates its cases with one
#: rotary module, whose frequencies transformers keeps from the longest case before (stateful, as RoPE's
#: docstring says); test_configs compares it with a fresh module below and past max_position_embeddings.
_SCALED = {
    "linear": {"rope_parameters": {"rope_type": "linear", "factor": 2.0}},
    "yarn": {
        "rope_parameters": {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 16,
            "beta_fast": 16.0,
            "attention_factor": 0.8,
        }
    },
    "llama3": {
        "rope_parameters": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        }
    },
    "rope_theta": {"rope_parameters": {"rope_theta": 12345.0}},
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "field",
    [_PARTIAL, _INTERLEAVE, *_SCALED.values()],
    ids=["partial_rotary_factor", "rope_interleave", *_SCALED],
)
def test_no_model_type_differs_when_its_config_carries_a_field_its_code_may_ignore(
    monkeypatch, field
) -> None:
    """The whole zoo with the field in every tiny config (0.5-1.5 min each, -m slow): posenc follows it
    where the model's code reads it and refuses it elsewhere, never a rotation the model does not do."""
    for model_type in CONFIG_MAPPING:
        monkeypatch.setitem(ROTARY_VARIANT, model_type, _with(ROTARY_VARIANT.get(model_type, {}), field))
    results = survey()
    assert not {t: d for t, (o, d) in results.items() if o == "mismatched"}
    assert Counter(o for o, _ in results.values())["matched"] >= 100


#: Matched types whose tiny class-default model builds its rotary but has no layer that uses it, besides those
#: whose tiny layers are all recurrent or convolutions: Flint's are full-attention ones, which it does not rotate.
#: posenc's encoding applies to the layers of a full-size model that rotate.
_NO_ROTATED_LAYER_WHEN_TINY = {"flint"}
#: Matched types whose built model rotates at a width its config does not give: Moonshine's attention layers write
#: their own head count into the config they share (config.update), so its rotaries, built after them, read the
#: encoder's heads (8 of 64 channels at these sizes; its decoder's, 2, before); its checkpoints give both stacks
#: the same count.
_MODEL_REWRITES_ITS_CONFIG = {"moonshine"}


@pytest.mark.slow
def test_a_matched_model_builds_a_rotary_module_exactly_where_posenc_rotates() -> None:
    """The zoo compares posenc with a model's rotary class whether or not the model uses it; here each matched
    type's class-default model (tiny, on the meta device: no memory) must build a rotary module exactly where
    posenc's encoding of the same config rotates (GraniteMoeHybrid and Zamba2 build none by default: NoPE), and
    every rotation posenc gives must have as many pairs as one of the model's rotary modules (the zoo had matched
    BLT's top-level rope_parameters, from which its model builds no rotary). Types whose tiny model or tiny config
    does not build, or that posenc refuses at these sizes, are skipped."""
    import re

    import torch

    from posenc.app.hf_zoo import FIT, TINY
    from posenc.hf import layer_encodings
    from posenc.hf._layer_types import NO_POSITION_TYPES
    from tests.hf.test_absolute import _tiny_model

    matched = re.search(r"Matched: (.*)\.", REPORT.read_text(encoding="utf-8"))
    assert matched is not None
    differ, compared = [], 0
    for model_type in (t.strip("` ") for t in matched.group(1).split(",")):
        cls = CONFIG_MAPPING[model_type]
        fit = {k: v for k, v in FIT.items() if hasattr(cls, k)}
        try:
            try:
                config = cls(**{**TINY, **fit})
            except Exception:
                config = cls(**fit)
            # (before the model is built: Moonshine's rewrites its config)
            encodings = layer_encodings(config)
            with torch.device("meta"):
                model = _tiny_model(config)
        except Exception:  # (not buildable at these sizes, or refused by posenc there)
            continue
        compared += 1
        kinds = {e.kind for e in encodings}
        pairs = {e.rotary_dim // 2 for e in encodings if isinstance(e, (posenc.RoPE, posenc.MRoPE))}
        # (GPT-J's and CodeGen's rotaries hold a sin/cos table, no inv_freq)
        built = {b.shape[-1] for name, b in model.named_buffers() if name.endswith("inv_freq")}
        if built and pairs - built and model_type not in _MODEL_REWRITES_ITS_CONFIG:
            differ.append(
                f"{model_type}: posenc rotates {sorted(pairs)} pairs, the model's rotaries {sorted(built)}"
            )
        names = (type(m).__name__.lower() for m in model.modules())
        builds = any("rotary" in n or "rope" in n for n in names)
        # (a tiny hybrid of recurrent or convolution layers alone builds its shared rotary module for none)
        no_attention = set(getattr(config, "layer_types", None) or ["full_attention"]) <= NO_POSITION_TYPES
        if (
            builds != ("rotary" in kinds)
            and not no_attention
            and model_type not in _NO_ROTATED_LAYER_WHEN_TINY
        ):
            differ.append(
                f"{model_type}: the model builds {'a' if builds else 'no'} rotary module, posenc {kinds}"
            )
    assert not differ, differ
    assert compared >= 150, compared


if __name__ == "__main__":
    REPORT.write_text(
        report(survey(), {name: survey(rope=rope) for name, rope in SCALINGS.items()}), encoding="utf-8"
    )
    print(f"wrote {REPORT}")


@pytest.mark.parametrize("key", ["attention_head_dim", "head_dim"])
def test_zamba2_keeps_a_head_width_its_config_gives(monkeypatch, key):
    """Zamba2's heads are 2 * hidden / heads wide unless the config gives a width, which its class keeps (posenc
    forced the default: a RoPE of another width)."""
    monkeypatch.setitem(ROTARY_VARIANT, "zamba2", {**ROTARY_VARIANT.get("zamba2", {}), key: 24})
    outcome, detail = survey(["zamba2"])["zamba2"]
    assert outcome == "matched", detail
    config = {
        "model_type": "zamba2",
        "use_mem_rope": True,
        "hidden_size": 64,
        "num_attention_heads": 2,
        "rope_theta": 1e4,
    }
    assert (
        posenc.hf.from_hf_config({**config, key: 24}).head_dim == 24
    )  # a config.json's (its class keeps it)
