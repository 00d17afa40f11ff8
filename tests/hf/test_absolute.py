"""Every installed transformers text (or speech) model with an absolute position table, checked by rule.

A model type is in the survey when its modeling source assigns a position table
(:data:`TABLE`: ``self.position_embeddings = nn.Embedding(``, ``self.embed_positions =
BartLearnedPositionalEmbedding(``, ``self.wpe = ...``, ``*SinusoidalPositionalEmbedding``...), or posenc
reads it as a BERT-like (DPR's, whose encoders are BERTs), and its config declares ``vocab_size`` (a text or
speech-to-text model; vision towers: tests/encodings/test_learned2d.py and tests/hf/test_configs.py). For each, a tiny random model is built from its config (nothing
downloaded), the table modules found by name (:data:`NAMES`) are hooked, and their output during a
forward pass on token ids without padding is recorded (Whisper: its encoder on silent features too; other
speech models: their text decoder alone), per stack; posenc's encoding from
:func:`~posenc.hf.from_hf_model` with the table's ``stack=`` (the learned table copied from the model;
sinusoids as :func:`~posenc.hf.from_hf_config` builds them) must add the same rows, whole tensors. Models with a pad
token run again on a batch padded on the left (row 0) and on the right (row 1), with its attention mask:
every real token's row must be posenc's at :func:`posenc.mask_to_positions` (real tokens numbered from
the first, whatever padding precedes them: RoBERTa's ``create_position_ids_from_input_ids``, fairseq's
``make_positions``, OPT's mask cumsum) or at the token's index (BERT, BART), and the report says which.
Padded tokens themselves are left out: the model gives them its row ``padding_idx`` (RoBERTa's and
fairseq's kin) or their index's, posenc position 0's with ``mask_to_positions``; attention masks them.

Outcomes: matched; refused (posenc raised ValueError naming the field); mismatched (fails the
test); not built (the tiny model or its forward pass could not be made, with the reason). Types whose
text forward never calls the table found in their source (it belongs to a vision tower), or whose model as built here
holds none (the table is a tower's or a prenet's it does not build), are listed apart.
``python tests/hf/test_absolute.py`` writes the report, docs/hf_absolute_coverage.md.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import warnings
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import posenc
from posenc.hf import SUPPORTED_MODEL_TYPES, from_hf_config, from_hf_model
from posenc.hf._bias import _LEARNED, ABSOLUTE_ONLY

transformers = pytest.importorskip("transformers")
from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES  # noqa: E402
from transformers.models.auto.modeling_auto import MODEL_MAPPING  # noqa: E402

#: The committed coverage report: `python tests/hf/test_absolute.py` writes it.
REPORT = Path(__file__).resolve().parents[2] / "docs" / "hf_absolute_coverage.md"
OUTCOMES = ("matched", "refused", "mismatched", "not built")
#: One width (32) and one length (40) under every name the config classes use for them.
TINY: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 32,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "max_position_embeddings": 40,
    "vocab_size": 99,
    "d_model": 32,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 32,
    "decoder_ffn_dim": 32,
    "max_source_positions": 40,
    "max_target_positions": 40,
}
#: Special tokens a class default puts outside the tiny vocabulary (Marian's pad 58100), brought inside it;
#: a pad token where the class has none (ESM numbers positions from it), so that every model runs padded.
SPECIAL = {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2}
#: Sizes a class needs beyond :data:`TINY` to run at its width: LayoutLMv3's spatial embedding,
#: 4 * coordinate_size + 2 * shape_size wide (and its relative bias off, which posenc refuses:
#: test_layoutlmv3s_relative_bias_is_refused_by_name); LiLT's layout stream, six hidden_size // 6 blocks.
TINY_FOR: dict[str, dict[str, Any]] = {
    "layoutlmv3": {"coordinate_size": 6, "shape_size": 4, "has_relative_attention_bias": False},
    "lilt": {"hidden_size": 48},
    "bros": {"hidden_size": 64},  # (its box sinusoids: hidden_size // 32 channels per coordinate)
    # (an embedding narrower than the hidden states, projected up: its table is embedding_size wide)
    # (its default numbers each table cell's tokens from 0, refused: test_tapass_positions_per_table_cell_...)
    "tapas": {"reset_position_index_per_cell": False},
    "deberta": {"embedding_size": 16},
    "deberta-v2": {"embedding_size": 16},
}
#: Second tries for classes that reject the tiny sizes: their own layer count (GPT-Neo's attention_types,
#: ProphetNet), an embedding as wide as the hidden states (SqueezeBERT).
RETRIES: tuple[dict[str, Any], ...] = ({"num_hidden_layers": None}, {"embedding_size": 32})
T = 7
#: Sinusoids: the model computes its angles in float32, posenc in float64 (positions < 40 here).
HF_FLOAT32_ANGLES = {"atol": 1e-5, "rtol": 0.0}
#: The attribute names of absolute position tables in transformers' modeling code.
NAMES = (
    "position_embeddings",
    "embed_positions",
    "wpe",
    "position_embedding",
    "positions_embed",
    "pos_emb",
    "embed_pos",
    "pos_embed",
    "position_embedding_table",
    "char_position_embeddings",  # (CANINE's characters')
    "position_embeds_layer",  # (Bark's GPTs')
)
#: A table assigned in the modeling source: an ``nn.Embedding`` (I-BERT: its ``QuantEmbedding``) or a ``*PositionalEmbedding(s)``
#: class.
TABLE = re.compile(
    r"self\.(?:" + "|".join(NAMES) + r")\s*=\s*(nn\.Embedding|QuantEmbedding|\w*PositionalEmbeddings?)\("
)
#: Mismatches whose fix lies in a module this survey does not own, with the fix; each must still mismatch
#: (a fix then fails the test, to be removed from here).
KNOWN: dict[str, str] = {}
#: Tables a model adds to something other than its tokens: Moonshine Streaming's decoder adds ``pos_emb`` to the
#: encoder's frames it cross-attends to (its tokens it rotates: tests/hf/test_zoo.py).
NOT_TOKENS = {"moonshine_streaming": "decoder.pos_emb"}
# relative and rotary modules under the same attribute names (RoFormer's sinusoidal table feeds its rotation:
# tests/hf/test_configs.py checks it)
_NOT_ABSOLUTE = ("Rotary", "Rel", "RoFormer")


def _config_class(model_type: str) -> Any:
    """The config class of a model type: transformers' registered one, or a parent's sub-config that no other
    name registers (Bark's three GPTs: ``semantic``, ``coarse_acoustics``, ``fine_acoustics``)."""
    if model_type in CONFIG_MAPPING:
        return CONFIG_MAPPING[model_type]
    subs = (
        c for parent in CONFIG_MAPPING.values() for c in (getattr(parent, "sub_configs", None) or {}).values()
    )
    return next(c for c in subs if getattr(c, "model_type", None) == model_type)


def _source(model_type: str) -> str | None:
    module = _config_class(model_type).__module__.replace("configuration_", "modeling_")
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return None
    return Path(spec.origin).read_text(encoding="utf-8") if spec is not None and spec.origin else None


def _selected(model_type: str) -> bool:
    """Whether the model's source assigns an absolute position table (or posenc reads it as a BERT-like's:
    DPR's encoders are BERTs, whose table is in BERT's source) and its config has a vocabulary."""
    src = _source(model_type)
    assigns = src is not None and any(not any(n in c for n in _NOT_ABSOLUTE) for c in TABLE.findall(src))
    if not assigns and model_type not in ABSOLUTE_ONLY:
        return False
    return "vocab_size" in _config_class(model_type)().to_dict()


def _tiny_config(model_type: str, change: dict[str, Any]) -> Any:
    """The class's config with the :data:`TINY` sizes (``change`` on top; ``None``: the class default)."""
    cls = _config_class(model_type)
    sizes = {k: v for k, v in {**TINY, **TINY_FOR.get(model_type, {}), **change}.items() if v is not None}
    # tiny sub-configs too: a multimodal parent's default vision tower (ViT-g) takes 11 s to build
    subs = {key: dict(sizes) for key in getattr(cls, "sub_configs", None) or {}}
    defaults = cls().to_dict()
    special = {
        key: value
        for key, value in SPECIAL.items()
        if key in defaults
        and (
            (defaults[key] is None and key == "pad_token_id")
            or (isinstance(defaults[key], int) and defaults[key] >= TINY["vocab_size"])
        )
    }
    return cls(**{**sizes, **special}, **subs)


def _build(model_type: str) -> tuple[Any, Any]:
    """The tiny config and model (eval mode), with :data:`RETRIES` where the class rejects the tiny sizes."""
    first: Exception | None = None
    for change in ({}, *RETRIES):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                config = _tiny_config(model_type, change)
                model = _tiny_model(config).eval()
        except Exception as err:  # (the tiny sizes do not fit this architecture)
            first = first or err
            continue
        if hasattr(model, "set_default_language") and getattr(config, "languages", None):
            model.set_default_language(config.languages[0])  # (X-MOD: one adapter per language)
        return config, model
    assert first is not None
    raise first


def _tiny_model(config: Any) -> Any:
    """``AutoModel``'s model, else the modeling module's bare ``*Model`` for this config class (CLIP's text model)."""
    # Asked first: AutoModel's "Unrecognized configuration class" error lists (imports) every model class,
    # 0.25 s a time for about 40 model types here.
    if type(config) in MODEL_MAPPING or getattr(config, "auto_map", None):
        try:
            return transformers.AutoModel.from_config(config)
        except ValueError as err:
            if "Unrecognized configuration class" not in str(err):
                raise
    module = importlib.import_module(type(config).__module__.replace("configuration_", "modeling_"))
    # (a decoder-only model's may be its *ForCausalLM alone: TrOCR; or its *Decoder: Canary's; a vision tower's its
    # *Transformer: Idefics 2's)
    found = sorted(
        (
            c
            for c in vars(module).values()
            if isinstance(c, type)
            and c.__name__.endswith(("Model", "ForCausalLM", "Decoder", "Transformer"))
            and not c.__name__.endswith("PreTrainedModel")
        ),
        key=lambda c: (not c.__name__.endswith("Model"), c.__name__.endswith("Decoder"), len(c.__name__)),
    )
    found = [c for c in found if getattr(c, "config_class", None) is type(config)]
    if not found:
        raise ValueError(f"no model class for {type(config).__name__}")
    return found[0](config)


def _tables(model: Any) -> dict[str, torch.nn.Module]:
    return {
        name: module
        for name, module in model.named_modules()
        if name.split(".")[-1] in NAMES
        and (
            isinstance(module, torch.nn.Embedding)
            or type(module).__name__.endswith(("Embedding", "Embeddings"))
        )
        and not any(n in type(module).__name__ for n in _NOT_ABSOLUTE)
    }


def _record(
    model: Any, tables: dict[str, torch.nn.Module], ids: torch.Tensor, mask: torch.Tensor | None
) -> dict:
    """Each table's first output in a forward pass (of the decoder alone where the model needs other inputs)."""
    seen: dict[str, torch.Tensor] = {}

    def keep_first(name: str, out: Any) -> None:  # returns None: a hook's return value replaces the output
        # A copy: Kosmos-2.5 adds its segment embedding to the returned rows in place.
        seen.setdefault(name, (out if isinstance(out, torch.Tensor) else out[0]).clone())

    hooks = [
        module.register_forward_hook(lambda _m, _a, out, name=name: keep_first(name, out))
        for name, module in tables.items()
    ]
    kwargs: dict[str, Any] = (
        {"input_ids": ids} if mask is None else {"input_ids": ids, "attention_mask": mask}
    )
    if getattr(model.config, "is_encoder_decoder", False):
        kwargs |= {f"decoder_{k}": v for k, v in kwargs.items()}
    kwargs |= _other_inputs(model, ids)
    try:
        with torch.no_grad():
            try:
                model(**kwargs)
            except Exception:
                seen.clear()  # (a speech model needs its features)
                config = model.config
                if getattr(config, "is_encoder_decoder", False) and getattr(config, "num_mel_bins", None):
                    # Whisper: its encoder on silence (all max_source_positions frames), its decoder on the ids
                    silence = torch.zeros(len(ids), config.num_mel_bins, 2 * config.max_source_positions)
                    model(
                        input_features=silence,
                        **{k: v for k, v in kwargs.items() if k.startswith("decoder_")},
                    )
                    return seen
                decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
                if decoder is None or decoder is model:
                    raise
                tokens = {k: v for k, v in kwargs.items() if not k.startswith("decoder_")}
                if "encoder_hidden_states" in inspect.signature(decoder.forward).parameters:
                    # (Cohere ASR's cross-attention reads them: three frames of zeros)
                    tokens["encoder_hidden_states"] = torch.zeros(len(ids), 3, decoder.config.hidden_size)
                decoder(**tokens)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def _other_inputs(model: Any, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """What a document or vision-language model's forward needs beside the tokens, all zeros: each token's
    box (LayoutLM's kin, BROS, LiLT), three image regions (LXMERT's features and boxes) and ViLT's image; Bark's
    fine GPT its codebooks."""
    wanted = inspect.signature(model.forward).parameters
    b, t = ids.shape
    inputs = {"bbox": torch.zeros(b, t, 4, dtype=torch.long)}
    if "codebook_idx" in wanted:  # (Bark's fine GPT: every codebook's ids, predicting the second)
        inputs |= {"input_ids": ids[..., None].expand(-1, -1, model.config.n_codes_total), "codebook_idx": 1}
    if model.config.model_type == "vilt":  # (its text table is read beside the image's patches)
        side = model.config.image_size
        inputs["pixel_values"] = torch.zeros(b, model.config.num_channels, side, side)
    if "visual_feats" in wanted:
        regions = 3
        inputs |= {
            "visual_feats": torch.zeros(b, regions, model.config.visual_feat_dim),
            "visual_pos": torch.zeros(b, regions, model.config.visual_pos_dim),
        }
    return {k: v for k, v in inputs.items() if k in wanted}


def _stack(name: str) -> str | None:
    parts = name.split(".")
    if "text_encoder" in parts:  # SeamlessM4T's (its "encoder" is the speech encoder)
        return "text_encoder"
    return next((s for s in ("decoder", "encoder") if any(s in p for p in parts)), None)


def _encoding(model: Any, name: str, as_v4: bool) -> posenc.PositionalEncoding:
    """posenc's encoding for the table at ``name``: a BERT-like's config read as a transformers 4
    ``config.json`` holds it (with ``position_embedding_type``) when ``as_v4``; else the model as it is."""
    cfg = model.config.to_dict()
    if (
        as_v4
        and name.endswith("embeddings.position_embeddings")
        and cfg["model_type"] not in SUPPORTED_MODEL_TYPES
    ):
        model = SimpleNamespace(
            config={**cfg, "position_embedding_type": cfg.get("position_embedding_type", "absolute")},
            state_dict=model.state_dict,
        )
    return from_hf_model(model, stack=_stack(name))


def _same(pe: posenc.PositionalEncoding, ours: torch.Tensor, ref: torch.Tensor) -> bool:
    if ref.shape[-1] != ours.shape[-1]:
        return False
    if isinstance(pe, posenc.Learned):  # the table itself, copied: equal
        return torch.equal(ours, ref)
    return torch.allclose(ours, ref, **HF_FLOAT32_ANGLES)


def check_model_type(model_type: str, *, as_v4: bool = True) -> tuple[str, str]:
    """(outcome, detail) for one model type (or ``("no text table", tables)``)."""
    if model_type in AUDIO_TOWERS:
        return check_audio_tower(model_type)
    try:
        config, model = _build(model_type)
    except Exception as err:  # (the tiny sizes do not fit this architecture, nor the retries)
        return "not built", f"tiny model: {type(err).__name__}: {str(err)[:80]}"
    tables = {n: m for n, m in _tables(model).items() if n != NOT_TOKENS.get(model_type)}
    if (
        not tables
    ):  # (its source's table is a tower's, which this model does not build: Qwen3-VL's text model)
        return "no text table", "its model builds none"
    pad = getattr(config, "pad_token_id", None)
    codebooks = (
        getattr(config, "num_codebooks", None) or 1
    )  # (MusicGen's decoder: ids per codebook of a sample)
    ids = torch.randint(3, TINY["vocab_size"], (2 * codebooks, T), generator=torch.Generator().manual_seed(0))
    if isinstance(pad, int):
        ids[ids == pad] = 3 if pad != 3 else 4  # no padding: every token has a position
    try:
        seen = _record(model, tables, ids, None)
    except Exception as err:
        return "not built", f"forward: {type(err).__name__}: {str(err)[:80]}"
    if not seen:
        return "no text table", ", ".join(f"`{n}`" for n in tables)
    padded = None
    if isinstance(pad, int):
        keep = torch.ones(2, T, dtype=torch.bool)
        keep[0, :2] = keep[1, -1] = False  # row 0 padded on the left, row 1 on the right
        try:
            rows = keep.repeat_interleave(codebooks, 0)
            padded = keep, _record(model, tables, ids.masked_fill(~rows, pad), keep.long())
        except Exception as err:
            return "not built", f"padded forward: {type(err).__name__}: {str(err)[:80]}"
    results: list[tuple[str, str]] = []
    for name, ref in seen.items():
        try:
            pe = _encoding(model, name, as_v4)
        except ValueError as err:
            results.append(("refused", f"`{name}`: {err}"))
            continue
        except RuntimeError as err:  # (load_state_dict: the table's shape is not the model's)
            results.append(("mismatched", f"`{name}`: {str(err).splitlines()[-1].strip()}"))
            continue
        if not isinstance(pe, (posenc.Learned, posenc.Sinusoidal)):
            results.append(("mismatched", f"`{name}`: posenc gives {type(pe).__name__}"))
            continue
        zeros = torch.zeros(2, T, pe.d_model)
        # (Longformer pads its input to a whole attention window: the first T rows are the tokens')
        if not _same(pe, pe.encode_input(zeros), ref[..., :T, :].expand_as(zeros)):
            results.append(("mismatched", f"`{name}`: {pe!r}: the rows differ from the model's"))
            continue
        detail = f"`{name}`: {pe!r}"
        if padded is not None and name in padded[1]:
            keep, got = padded[0], padded[1][name][..., :T, :].expand_as(zeros)
            numbering = {
                "positions from the padding": pe.encode_input(zeros, posenc.mask_to_positions(keep)),
                "positions by index": pe.encode_input(zeros),
            }
            found = next((how for how, ours in numbering.items() if _same(pe, ours[keep], got[keep])), None)
            if found is None:
                results.append(("mismatched", f"{detail}: padded batch: real tokens' rows differ"))
                continue
            detail += f"; padded: {found}"
        results.append(("matched", detail))
    outcome = next(o for o in ("mismatched", "refused", "matched") if any(r == o for r, _ in results))
    return outcome, "; ".join(d for r, d in results if r == outcome)


#: Whisper's kin among audio towers: every row of their table added to their fixed frames (:func:`check_audio_tower`)
AUDIO_TOWERS = [
    "qwen2_audio_encoder",
    "audioflamingo3_encoder",
    "voxtral_encoder",
    "moss_transcribe_diarize_audio",
]


def check_audio_tower(model_type: str) -> tuple[str, str]:
    """A Whisper-like audio tower adds every row of its table (a checkpoint's, frozen) to the ``max_source_positions``
    frames its convolutions give, reading the table's weight (no call a hook sees): posenc's ``from_hf_model`` must
    give the same sums, whole tensors, for the model and for its ``config.json``."""
    frames, width = 6, 32
    sizes = {"num_mel_bins": 4, "max_source_positions": frames, "encoder_layers": 1, "num_hidden_layers": 1}
    heads = {
        "encoder_attention_heads": 2,
        "num_attention_heads": 2,
        "encoder_ffn_dim": 8,
        "intermediate_size": 8,
    }
    config = CONFIG_MAPPING[model_type](**sizes, **heads, d_model=width)
    model = _tiny_model(config).eval()
    with torch.no_grad():
        model.embed_positions.weight.normal_(generator=torch.Generator().manual_seed(0))
    seen: dict[str, torch.Tensor] = {}
    model.conv2.register_forward_hook(lambda _m, _a, out: seen.update(conv=out))
    model.layers[0].register_forward_pre_hook(
        lambda _m, args, kw: seen.update(first=(args or (kw["hidden_states"],))[0]), with_kwargs=True
    )
    features = torch.randn(2, 4, 2 * frames, generator=torch.Generator().manual_seed(1))
    wanted = inspect.signature(model.forward).parameters  # (AudioFlamingo 3's: a mask of its features)
    mask = {"input_features_mask": torch.ones(2, 2 * frames, dtype=torch.long)}
    with torch.no_grad():
        model(features, **(mask if "input_features_mask" in wanted else {}))
    tokens = torch.nn.functional.gelu(seen["conv"]).permute(
        0, 2, 1
    )  # (b, frames, width): what the model adds to
    for given in (model, SimpleNamespace(config=config.to_dict(), state_dict=model.state_dict)):
        pe = from_hf_model(given)
        if not torch.equal(pe.encode_input(tokens), seen["first"]):
            return "mismatched", f"`embed_positions`: {pe!r}: the sums differ from the model's"
    return "matched", f"`embed_positions`: {pe!r}; every row, to its frames"


def survey() -> dict[str, tuple[str, str]]:
    """Every selected model type of the installed transformers -> (outcome, detail)."""
    return {t: check_model_type(t) for t in CONFIG_MAPPING_NAMES if _selected(t)}


def report(results: dict[str, tuple[str, str]]) -> str:
    """The coverage as a Markdown page (what docs/hf_absolute_coverage.md holds)."""
    counts = Counter(outcome for outcome, _ in results.values())

    def cell(text: str) -> str:  # (posenc's refusals list every model type of its table: the start says why)
        text = text.replace("|", "/").replace("\n", " ")
        return text if len(text) <= 400 else text[:400] + " ..."

    lines = [
        "# Absolute position tables: model zoo coverage",
        "",
        f"Every model type of transformers {transformers.__version__} whose modeling code assigns a learned or",
        "sinusoidal absolute position table (`position_embeddings`, `embed_positions`, `wpe`, `position_embedding`,",
        "... as an `nn.Embedding` or a `*PositionalEmbedding` class; DPR's, in the BERT it wraps, too) and whose",
        "config has a `vocab_size` (text and speech-to-text models), built tiny: the table's output in a forward",
        "pass, whole tensors, against `posenc.hf.from_hf_model` (the learned table copied; sinusoids from the",
        "config). Models with a pad token also run on a batch padded on the left and on the right: every real",
        "token must get posenc's row at `posenc.mask_to_positions(mask)` (\"positions from the padding\": RoBERTa's,",
        "fairseq's and OPT's kin)",
        'or at its index ("positions by index"), as the model does. Padded tokens themselves are not compared:',
        "the model adds its row `padding_idx` there (RoBERTa's and fairseq's kin), which no posenc position",
        "addresses; attention masks them, so no real token sees them.",
        "(`tests/hf/test_absolute.py`; written by `python tests/hf/test_absolute.py`.)",
        "",
        "| outcome | model types |",
        "| --- | --- |",
        *(f"| {o} | {counts[o]} |" for o in OUTCOMES),
        "",
        "| model type | outcome | table: posenc encoding, or why not |",
        "| --- | --- | --- |",
        *(
            f"| `{t}` | {o} | {cell(d if t not in KNOWN else f'{d} (known: {KNOWN[t]})')} |"
            for t, (o, d) in sorted(results.items())
            if o in OUTCOMES
        ),
        "",
        "These never call the table found in their source: their text forward does not, or the model built here "
        "holds none (a vision or audio tower's, or a part it does not build: SpeechT5's prenets), or it adds the "
        "table to something else (Moonshine Streaming's decoder: to the encoder's frames): "
        + ", ".join(f"`{t}`" for t, (o, _) in sorted(results.items()) if o not in OUTCOMES)
        + ".",
        "",
    ]
    return "\n".join(lines)


def test_every_model_with_an_absolute_table() -> None:
    results = survey()
    text = report(results)
    print(text)
    mismatched = {t: d for t, (o, d) in results.items() if o == "mismatched"}
    assert not mismatched.keys() - KNOWN.keys(), mismatched
    assert not KNOWN.keys() - mismatched.keys(), "fixed: remove it from KNOWN"
    counts = Counter(o for o, _ in results.values())
    assert counts["matched"] >= 30, counts
    for model_type, (outcome, detail) in results.items():
        if outcome == "refused":
            assert "'" in detail or "=" in detail, (model_type, detail)  # names the field at fault
    if f"transformers {transformers.__version__} " in REPORT.read_text(encoding="utf-8"):
        assert text == REPORT.read_text(encoding="utf-8"), (
            f"{REPORT} is stale: python tests/hf/test_absolute.py"
        )


@pytest.mark.parametrize("kind", ["relative_key", "relative_key_query"])
def test_relative_position_embedding_types_are_refused_by_name(kind: str) -> None:
    with pytest.raises(ValueError, match=f"position_embedding_type='{kind}'"):
        from_hf_config({"model_type": "bert", **TINY, "position_embedding_type": kind})


def test_layoutlmv3s_relative_bias_is_refused_by_name() -> None:
    """LayoutLMv3's attention adds a bucketed relative bias by default (``has_relative_attention_bias``): not
    converted, so its table alone is refused rather than passed off as the model's encoding."""
    config = CONFIG_MAPPING["layoutlmv3"]().to_dict() | {"position_embedding_type": "absolute"}
    with pytest.raises(ValueError, match="has_relative_attention_bias=True"):
        from_hf_config(config)
    assert repr(from_hf_config({**config, "has_relative_attention_bias": False})) == (
        "Learned(768, max_len=510, offset=2)"  # RoBERTa's numbering: real tokens from pad_token_id + 1
    )


def test_tapass_positions_per_table_cell_are_refused_by_name() -> None:
    """TAPAS numbers each table cell's tokens from 0 (``reset_position_index_per_cell``, its default, read from the
    inputs' token types): refused by name, not converted to positions by index (it was, silently)."""
    config = CONFIG_MAPPING["tapas"]()
    for form in (config, config.to_dict()):
        with pytest.raises(ValueError, match="reset_position_index_per_cell=True"):
            from_hf_config(form)
    assert repr(from_hf_config({**config.to_dict(), "reset_position_index_per_cell": False})) == (
        "Learned(768, max_len=1024)"
    )


def test_trocrs_sinusoidal_table_matches_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """TrOCR with ``use_learned_position_embeddings=False``: fairseq's sinusoids, numbered from the padding."""
    monkeypatch.setitem(TINY_FOR, "trocr", {"use_learned_position_embeddings": False})
    outcome, detail = check_model_type("trocr")
    assert outcome == "matched" and "Sinusoidal(" in detail and "positions from the padding" in detail, detail


@pytest.mark.parametrize("model_type", ["musicgen_decoder", "musicgen_melody_decoder"])
def test_musicgens_cos_first_sinusoids_match_its_own_module_after_a_cache(model_type: str) -> None:
    """MusicGen's decoder adds ``[cos | sin]`` tensor2tensor sinusoids at each token's index plus the cache's
    length: its own module at the class's sizes, against the config object's and a ``config.json``'s encoding."""
    config = CONFIG_MAPPING[model_type]()
    module = importlib.import_module(type(config).__module__.replace("configuration_", "modeling_"))
    (table_class,) = (c for name, c in vars(module).items() if name.endswith("SinusoidalPositionalEmbedding"))
    own = table_class(config.max_position_embeddings, config.hidden_size)
    cached, t = 30, 7
    # (MusicGen's reads the ids' (b, codebooks, t) shape, MusicGen Melody's the embeddings' (b, t, d))
    first = next(iter(inspect.signature(own.forward).parameters))
    given_rows = (
        torch.zeros(2, config.num_codebooks, t, dtype=torch.long)
        if first == "input_ids"
        else torch.zeros(2, t, config.hidden_size)
    )
    ref = own(given_rows, cache_length=cached)  # (t, d)
    for given in (config, {"model_type": model_type}):
        pe = from_hf_config(given)
        ours = pe.encode_input(torch.zeros(1, t, config.hidden_size), torch.arange(cached, cached + t))
        torch.testing.assert_close(ours[0], ref, **HF_FLOAT32_ANGLES)
        assert not torch.allclose(ours[0], ref.roll(config.hidden_size // 2, -1), **HF_FLOAT32_ANGLES)


def test_canarys_scaled_sinusoids_match_its_own_module() -> None:
    """Canary's decoder adds the paper's ``[sin | cos]`` table over sqrt(hidden_size) at each token's index: its own
    module at the class's sizes, against the parent's config object and ``config.json`` (``stack="decoder"``)."""
    from transformers.models.canary.modeling_canary import CanaryPositionalEmbedding

    config = CONFIG_MAPPING["canary"]()
    d = config.decoder_config.hidden_size
    positions = torch.tensor([0, 1, 5, 300, config.decoder_config.max_position_embeddings - 1])
    ref = CanaryPositionalEmbedding(config.decoder_config.max_position_embeddings, d)(positions)
    for given in (config, config.to_dict(), config.decoder_config):
        pe = (
            from_hf_config(given, stack="decoder")
            if given is not config.decoder_config
            else from_hf_config(given)
        )
        ours = pe.encode_input(torch.zeros(1, len(positions), d), positions)[0]
        torch.testing.assert_close(ours, ref, **HF_FLOAT32_ANGLES)
        assert not torch.allclose(ours * d**0.5, ref, **HF_FLOAT32_ANGLES)  # (the scale is there)
    # its stacks differ (a Parakeet encoder): the refusal says so on one line
    with pytest.raises(
        ValueError, match=r"differ in their position encodings \(layer 0: RelPosXL\( num_heads=8"
    ):
        from_hf_config(config)


@pytest.mark.parametrize("model_type", AUDIO_TOWERS)
def test_whisper_like_audio_towers_add_the_table_they_hold(model_type: str) -> None:
    outcome, detail = check_audio_tower(model_type)
    assert outcome == "matched" and detail.endswith("Learned(32, max_len=6); every row, to its frames"), (
        detail
    )


def test_cohere_asrs_stacks_are_its_decoder_table_and_its_encoder_config() -> None:
    """Cohere ASR's top-level fields are its decoder's (a learned table, copied by from_hf_model); its encoder is
    the Parakeet encoder it holds, which the parent refuses to stand for, naming it."""
    config = CONFIG_MAPPING["cohere_asr"]()
    assert repr(from_hf_config(config, stack="decoder")) == "Learned(1024, max_len=1024)"
    with pytest.raises(ValueError, match=r"this stack's config is its encoder_config \(parakeet_encoder\)"):
        from_hf_config(config, stack="encoder")
    with pytest.raises(ValueError, match="pass stack='encoder' or 'decoder'"):
        from_hf_config(config)
    assert isinstance(from_hf_config(config.encoder_config), posenc.RelPosXL)


@pytest.mark.parametrize(
    ("model_type", "outcome"),
    [*((t, "matched") for t in ("roberta", "xlm-roberta", "m2m_100")), ("xglm", "refused")],
)
def test_a_padding_index_other_than_the_checkpoints_numbers_as_the_model_does(
    monkeypatch: pytest.MonkeyPatch, model_type: str, outcome: str
) -> None:
    """pad_token_id 5: RoBERTa's kin and M2M100 number real tokens from row 6; XGLM's table zeroes row 5, which it
    reads at position 3: refused."""
    monkeypatch.setitem(TINY, "pad_token_id", 5)
    found, detail = check_model_type(model_type)
    assert found == outcome, detail
    if outcome == "refused":
        assert "pad_token_id=5 zeroes the row its code reads at position pad_token_id - 2" in detail


@pytest.mark.parametrize("model_type", sorted(ABSOLUTE_ONLY))
def test_absolute_only_types_convert_from_the_installed_config_object(model_type: str) -> None:
    """transformers 5 dropped ``position_embedding_type`` from these config classes, or they never had it (their
    code always adds the absolute table; DeBERTa's by its flags): the config object as it is converts to the same
    rows."""
    if "position_embedding_type" in _config_class(model_type)().to_dict():
        pytest.skip("this transformers still declares position_embedding_type")
    # (MPNet's attention always adds relative positions: refused, as a config.json declaring the table is)
    assert check_model_type(model_type, as_v4=False)[0] == ("refused" if model_type == "mpnet" else "matched")


@pytest.mark.parametrize(
    "model_type", sorted(t for t, table in _LEARNED.items() if table.default != (None, None))
)
def test_a_config_json_leaving_out_the_sizes_takes_the_class_defaults(model_type: str) -> None:
    """A ``config.json`` saved by transformers holds only what differs from its class: the width and length
    it leaves out are the class's (of the table's stack: Cohere ASR's decoder)."""
    stack = _LEARNED[model_type].stacks[0]
    assert repr(from_hf_config({"model_type": model_type}, stack=stack)) == repr(
        from_hf_config(_config_class(model_type)(), stack=stack)
    )


if __name__ == "__main__":
    REPORT.write_text(report(survey()), encoding="utf-8")
    print(f"wrote {REPORT}")
