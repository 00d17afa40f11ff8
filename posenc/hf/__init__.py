"""Hugging Face interop: the encoding a ``transformers`` model config describes, and its weights.

* :func:`from_hf_config` (:mod:`posenc.hf.configs`) reads a ``transformers`` config object, or
  the dict of a model's ``config.json``, and returns the posenc encoding that model uses, with
  every setting carried over (RoPE base, scaling dict, partial rotation and layout; T5 buckets;
  ALiBi slopes; learned table size and offset; sinusoidal layout, spacing and offset).
  :data:`SUPPORTED_MODEL_TYPES` and :func:`supported_models_markdown` are generated from its
  one conversion table.
* :func:`from_hf_model` (:mod:`posenc.hf.weights`) also copies the trained position weights
  out of a loaded model.
* :func:`interleaved_to_half`, :func:`half_to_interleaved` and :func:`rope_layout_permutation`
  convert q/k projection weights between the two RoPE layouts; they live in
  :mod:`posenc.functional.rope_layout` and are re-exported here.
* :class:`FalconALiBi` (Falcon's ALiBi, slopes scaled by ``1/sqrt(head_dim)``) lives in
  :mod:`posenc.encodings.alibi` and is re-exported here.

``transformers`` is optional: nothing here imports it.
"""

from ..encodings.alibi import FalconALiBi
from ..functional.rope_layout import half_to_interleaved, interleaved_to_half, rope_layout_permutation
from .configs import SUPPORTED_MODEL_TYPES, from_hf_config, supported_models_markdown
from .weights import from_hf_model

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "FalconALiBi",
    "from_hf_config",
    "from_hf_model",
    "half_to_interleaved",
    "interleaved_to_half",
    "rope_layout_permutation",
    "supported_models_markdown",
]
