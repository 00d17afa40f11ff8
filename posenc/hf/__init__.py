"""Hugging Face interop: the encoding a ``transformers`` model config describes, and its weights.

* :func:`from_hf_config` (:mod:`posenc.hf.configs`) reads a ``transformers`` config object, or
  the dict of a model's ``config.json``, and returns the posenc encoding that model uses, with
  every setting carried over (RoPE base, scaling dict, partial rotation and layout; T5 buckets;
  ALiBi slopes; learned table size and offset; sinusoidal layout, spacing and offset).
  :data:`SUPPORTED_MODEL_TYPES` and :func:`supported_models_markdown` are generated from its
  one conversion table; other text models are built from transformers 5's standardized RoPE
  fields (:mod:`posenc.hf._rule`), or refused naming the field posenc cannot read.
* :func:`layer_encodings` gives one encoding per layer (shared where layers agree) for models
  whose layers differ (Gemma 3/3n/4, ModernBERT, Llama 4, SmolLM3, Cohere 2), and
  :func:`layer_windows` the sliding window of each layer.
* :func:`from_hf_model` (:mod:`posenc.hf.weights`) also copies the trained position weights
  out of a loaded model; ``layer=i`` for the conformer speech encoders (Wav2Vec2-BERT,
  wav2vec2-conformer, SeamlessM4T, Parakeet), whose layers each hold their own relative tables.
* ``stack=`` (both functions) picks the stack of an encoder-decoder model whose stacks differ
  (Whisper, LED, SeamlessM4T's text stacks) or of a parent config (T5Gemma, Dia).
* Qwen2-VL / Qwen2.5-VL / Qwen3-VL text models map to :class:`~posenc.MRoPE`.
* q/k projection weights convert between the two RoPE layouts with
  :func:`posenc.functional.interleaved_to_half` and :func:`~posenc.functional.half_to_interleaved`.

``transformers`` is optional: nothing here imports it.
"""

from .configs import (
    SUPPORTED_MODEL_TYPES,
    from_hf_config,
    layer_encodings,
    layer_windows,
    supported_models_markdown,
)
from .weights import from_hf_model

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "from_hf_config",
    "from_hf_model",
    "layer_encodings",
    "layer_windows",
    "supported_models_markdown",
]
