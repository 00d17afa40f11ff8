"""BERT-like encoders by rule: ``position_embedding_type='absolute'`` -> :class:`~posenc.Learned`.

For each installed transformers model type whose config declares ``position_embedding_type``
(``'absolute'`` by default) and which posenc does not convert by its table, a tiny random model is
built from its config (nothing downloaded), its ``embeddings.position_embeddings`` output is
recorded during a forward pass on token ids without padding, and posenc's encoding from
:func:`~posenc.hf.from_hf_model` (the table copied from the model) must give the same rows.

Outcomes: matched; refused (posenc raised ValueError naming the field); mismatched (fails the
test); not built (the tiny model or its forward pass could not be made, with the reason).
"""

from __future__ import annotations

import importlib.util
import warnings
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import posenc
from posenc.hf import SUPPORTED_MODEL_TYPES, from_hf_config, from_hf_model
from posenc.hf._bias import _ABSOLUTE_ONLY

transformers = pytest.importorskip("transformers")
from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES  # noqa: E402

TINY: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 32,
    "num_attention_heads": 2,
    "num_hidden_layers": 1,
    "max_position_embeddings": 40,
    "vocab_size": 99,
}
T = 7


def _has_table(model_type: str) -> bool:
    """Whether the model's code builds an ``nn.Embedding`` named ``position_embeddings`` (cheap: its source)."""
    module = CONFIG_MAPPING[model_type].__module__.replace("configuration_", "modeling_")
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return False
    origin = Path(spec.origin) if spec is not None and spec.origin else None
    return origin is not None and "self.position_embeddings = nn.Embedding(" in origin.read_text(
        encoding="utf-8"
    )


def _case(model_type: str, *, as_v4: bool = True) -> tuple[str, str]:
    """(outcome, detail) for one model type with a learned ``embeddings.position_embeddings`` table.

    With ``as_v4`` the config is read as a transformers 4 ``config.json`` holds it: with
    ``position_embedding_type``; else the installed transformers' config object as it is.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # tiny sub-configs too: a multimodal parent's default vision tower (ViT-g) takes 11 s to build
            subs = {key: dict(TINY) for key in getattr(CONFIG_MAPPING[model_type], "sub_configs", None) or {}}
            config = CONFIG_MAPPING[model_type](**TINY, **subs)
        model = transformers.AutoModel.from_config(config).eval()
        table = next(m for n, m in model.named_modules() if n.endswith("embeddings.position_embeddings"))
    except Exception as err:  # (the tiny sizes do not fit this architecture)
        return "not built", f"tiny model: {type(err).__name__}: {str(err)[:80]}"
    seen: list[torch.Tensor] = []
    table.register_forward_hook(lambda module, args, out: seen.append(out))
    pad = getattr(config, "pad_token_id", None)
    pad = pad if isinstance(pad, int) else -1
    ids = torch.randint(0, TINY["vocab_size"], (2, T), generator=torch.Generator().manual_seed(0))
    ids[ids == pad] = (pad + 1) % TINY["vocab_size"]  # no padding: every token has a position
    try:
        with torch.no_grad():
            model(input_ids=ids)
    except Exception as err:
        return "not built", f"forward: {type(err).__name__}: {str(err)[:80]}"

    # the model with its config as a transformers 4 config.json (the hub's) gives it
    old = SimpleNamespace(
        config={**model.config.to_dict(), "position_embedding_type": "absolute"}, state_dict=model.state_dict
    )
    if not as_v4:
        old = model
    try:
        pe = from_hf_model(old)
    except ValueError as err:
        return "refused", str(err)
    except RuntimeError as err:  # (load_state_dict: the table's shape is not the model's)
        return "mismatched", str(err).splitlines()[-1].strip()
    if not isinstance(pe, posenc.Learned):
        return "mismatched", f"posenc gives {type(pe).__name__}"
    ours = pe.encode_input(torch.zeros(2, T, pe.d_model))
    # (Longformer pads its input to a whole attention window: the first T rows are the tokens')
    ref = seen[0][..., :T, :].expand_as(ours) if seen and seen[0].shape[-1] == pe.d_model else None
    if ref is None or not torch.equal(ours, ref):
        return "mismatched", f"{pe!r}: the rows differ from the model's position embeddings"
    return "matched", ""


def test_bert_like_encoders_by_rule() -> None:
    types = [t for t in CONFIG_MAPPING_NAMES if t not in SUPPORTED_MODEL_TYPES and _has_table(t)]
    results = {t: _case(t) for t in types}
    print("\n".join(f"{t}: {o} {d}" for t, (o, d) in sorted(results.items())))
    assert not {t: d for t, (o, d) in results.items() if o == "mismatched"}
    counts = Counter(o for o, _ in results.values())
    assert counts["matched"] >= 30, counts
    for model_type, (outcome, detail) in results.items():
        if outcome == "refused":
            assert "'" in detail, (model_type, detail)  # names the field at fault


@pytest.mark.parametrize("kind", ["relative_key", "relative_key_query"])
def test_relative_position_embedding_types_are_refused_by_name(kind: str) -> None:
    with pytest.raises(ValueError, match=f"position_embedding_type='{kind}'"):
        from_hf_config({"model_type": "bert", **TINY, "position_embedding_type": kind})


@pytest.mark.parametrize("model_type", sorted(_ABSOLUTE_ONLY))
def test_absolute_only_types_convert_from_the_installed_config_object(model_type: str) -> None:
    """transformers 5 dropped ``position_embedding_type`` from these config classes (their code always adds
    the absolute table): the config object as it is converts to the same rows."""
    if "position_embedding_type" in CONFIG_MAPPING[model_type]().to_dict():
        pytest.skip("this transformers still declares position_embedding_type")
    assert _case(model_type, as_v4=False) == ("matched", "")
