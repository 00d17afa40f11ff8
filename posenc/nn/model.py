"""A small transformer language model whose position encoding is a config string.

:class:`TransformerLM` builds each distinct encoding once, prepares its position state once per
forward and hands it to every :class:`~posenc.nn.TransformerBlock` that uses it; ``generate``
decodes with a :class:`~posenc.KVCache`.

Shape key: ``b`` batch, ``t`` new tokens, ``d`` model width, ``v`` vocabulary.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .._checks import check_bool, check_int, check_positive_float, check_positive_int
from .._compat import check_values
from ..base import PositionalEncoding
from ..registry import build
from .cache import KVCache
from .layers import MultiheadAttention, TransformerBlock, _prepare
from .schedule import layer_specs, layer_windows, spec_key


class TransformerLM(nn.Module):
    """A small decoder (or encoder) language model whose position encoding is a config string.

    Token embedding, ``encode_input`` once on the embeddings (additive encodings),
    ``num_layers`` pre-norm :class:`TransformerBlock` s, a final norm and a head tied to the
    embedding. Encodings are built with the model's sizes (``d_model``, ``num_heads``,
    ``head_dim``, ``max_len``, ``causal``) and held once, by the model (the blocks hold none,
    so T5's bias table is one parameter in one module, as FSDP needs): each forward prepares
    the position state of each distinct encoding once (:meth:`~posenc.PositionalEncoding.prepare`:
    RoPE's cos/sin rows, T5's bias by distance) and hands it to every block that uses it.

    Per-layer encodings (Gemma's local and global bases, Llama 4's NoPE layers): ``position``
    may be a list with one spec per layer or a pattern such as ``"rope*3 + none"``
    (:func:`layer_specs`). Layers whose specs are equal (``"rope"`` and ``{"name": "rope"}``)
    or that get the same module share one encoding and one prepared state. With one encoding
    for every layer it is ``model.encoding``; with several, ``model.encodings`` (distinct
    ones) and ``model.layer_encoding`` (the index of each layer's), and ``model.encoding``
    is ``None``.

    Args:
        vocab_size: vocabulary size ``v``.
        d_model: model width ``d``.
        num_layers: number of blocks.
        num_heads: attention heads (``d_model`` must be a multiple).
        position: a spec for :func:`posenc.build` (``"rope"``, ``"alibi"``, ``"t5"``,
            ``"sinusoidal"``, ``"learned"``, ``"none"``, ``"rope(base=500000.0)"``, a dict) or
            a built encoding, for every layer; or a list of one spec per layer; or a pattern
            string (:func:`layer_specs`). Additive encodings act once, on the embeddings, so
            they cannot be mixed with others.
        max_len: the longest sequence; required by ``"learned"``, optional otherwise.
        causal: a decoder (``True``) or a bidirectional encoder (``False``).
        dropout: dropout on embeddings, attention weights and block outputs.
        mlp_ratio: MLP hidden width over ``d_model``.
        num_kv_heads: key/value heads (grouped-query attention).
        bias: biases in linear layers and norms.
        tie_embeddings: share the output head's weight with the token embedding.
        window: a sliding window for every layer, a list of one window (or ``None``) per layer,
            or ``None`` for global attention everywhere (see :func:`posenc.attention`).
        embed_scale: ``None`` (default): token embeddings used as they are, drawn at GPT-2's
            std 0.02. A positive float ``s``: the original Transformer's recipe (Vaswani et al.,
            2017, §3.4, with tensor2tensor's initialisation): the embedding output is
            multiplied by ``s`` and the embedding weights are drawn at std ``1 / s``, so tokens
            enter at std 1 whatever ``s`` is. With ``s = sqrt(d_model)`` this is the paper's
            setting, which puts tokens on the scale of a unit-amplitude table such as the
            sinusoidal one; with a tied head the head's weights are those same embeddings.
        attention_sinks: a learned sink logit per head in every layer's attention (gpt-oss;
            :func:`posenc.attention`'s ``sinks``), initialised to zeros.

    Shape:
        ``forward(input_ids)``: ``(b, t)`` long ``-> (b, t, v)`` logits.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_layers: int,
        num_heads: int,
        position: Any = "rope",
        max_len: int | None = None,
        causal: bool = True,
        dropout: float = 0.0,
        mlp_ratio: float = 4.0,
        num_kv_heads: int | None = None,
        bias: bool = False,
        tie_embeddings: bool = True,
        window: int | list[int | None] | None = None,
        embed_scale: float | None = None,
        attention_sinks: bool = False,
    ) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        #: The factor on the token embeddings' output, or ``None`` (see the class docstring).
        self.embed_scale = None if embed_scale is None else check_positive_float("embed_scale", embed_scale)
        self.d_model = check_positive_int("d_model", d_model)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.max_len = None if max_len is None else check_positive_int("max_len", max_len)
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} must be a multiple of num_heads={num_heads}")
        self.causal = check_bool("causal", causal)
        check_bool("tie_embeddings", tie_embeddings)
        self.windows = layer_windows(window, num_layers)
        specs = layer_specs(position, num_layers)
        keys = [spec_key(spec) for spec in specs]  # equal specs share one encoding
        unique = list(dict.fromkeys(keys))  # in the order of first use
        dims = dict(d_model=d_model, num_heads=num_heads, head_dim=d_model // num_heads, max_len=max_len)
        distinct = [build(specs[keys.index(key)], causal=causal, **dims) for key in unique]
        if len(distinct) > 1 and any(e.kind == "additive" for e in distinct):
            names = sorted({type(e).__name__ for e in distinct if e.kind == "additive"})
            raise ValueError(
                f"position: the additive encoding(s) {', '.join(names)} act once, on the token embeddings, "
                f"so they cannot be given per layer beside other encodings; use one spec for every layer"
            )
        #: Which of the distinct encodings each layer uses.
        self.layer_encoding: tuple[int, ...] = tuple(unique.index(key) for key in keys)
        self.encoding = distinct[0] if len(distinct) == 1 else None
        self.encodings = None if len(distinct) == 1 else nn.ModuleList(distinct)
        self.embed = nn.Embedding(vocab_size, d_model)
        self.embed_dropout = nn.Dropout(dropout)
        # The blocks hold no encoding (None): the model prepares each one's state once per forward.
        sinks_kv: dict[str, Any] = dict(num_kv_heads=num_kv_heads, attention_sinks=attention_sinks)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, num_heads, None, causal, dropout, mlp_ratio, bias, window=w, **sinks_kv)
            for w in self.windows
        )
        self.norm = nn.LayerNorm(d_model, bias=bias)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.tie_embeddings = tie_embeddings
        if tie_embeddings:
            self.head.weight = self.embed.weight
        self._init_parameters()

    def _apply(self, fn: Any, recurse: bool = True) -> TransformerLM:
        super()._apply(fn, recurse)
        if self.tie_embeddings:  # to_empty() (from meta) makes a tensor per module: tie them again
            self.head.weight = self.embed.weight
        return self

    def _init_parameters(self) -> None:
        self.apply(self._init_weights)
        # The embedding last, so that a model without embed_scale draws exactly what it always did.
        if self.embed_scale is not None:
            nn.init.normal_(self.embed.weight, mean=0.0, std=1.0 / self.embed_scale)

    def layer_encodings(self) -> list[PositionalEncoding]:
        """The encoding of each layer, in order (the same object for layers that share one)."""
        distinct = self._distinct()
        return [distinct[i] for i in self.layer_encoding]

    def _distinct(self) -> list[PositionalEncoding]:
        return [self.encoding] if self.encoding is not None else list(self.encodings or [])  # type: ignore[arg-type]

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # GPT-2's initialisation: small normal weights keep the initial logits near uniform.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):  # ones and zeros: no draw, so construction is unchanged
            module.reset_parameters()
        elif isinstance(module, MultiheadAttention) and module.sinks is not None:  # (zeros, as built)
            nn.init.zeros_(module.sinks)

    def reset_parameters(self) -> None:
        """Re-initialise every weight and rebuild every cache, e.g. after ``to_empty()`` from the meta device.

        As at construction: each encoding's own ``reset_parameters`` (learned tables, kernels), then
        the model's initialisation over every linear and embedding layer (an encoding's too: T5's
        table, Shaw's, FIRE's MLP), norms theirs and sink logits zero; every encoding's non-persistent
        caches (cos/sin, bias tables) are recomputed on their current device.
        """
        for encoding in self._distinct():
            for sub in encoding.modules():  # (not a plain submodule's: T5's embedding would draw N(0, 1))
                if isinstance(sub, PositionalEncoding):
                    reset = getattr(sub, "reset_parameters", None)
                    if callable(reset):
                        reset()
                    sub.reset_caches()
        self._init_parameters()

    def forward(
        self,
        input_ids: Tensor,
        *,
        attention_mask: Tensor | None = None,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
        document_ids: Tensor | None = None,
    ) -> Tensor:
        """Logits for every token.

        Args:
            input_ids: ``(b, t)`` token ids (long), each in ``[0, vocab_size)``.
            attention_mask: ``(b, cached + t)`` keep-mask (bool or 0/1), e.g. for a left- or
                right-padded batch (``(b, capacity)`` with a static ``KVCache(capacity=...)``);
                positions then come from :func:`posenc.mask_to_positions`, so every real token
                gets the same output as in its unpadded sequence.
            positions: ``(t,)`` or ``(b, t)`` explicit positions of the new tokens. Default: ``0..t-1``,
                or with a cache each row's largest cached position + 1 onwards.
            cache: a :class:`KVCache` for incremental decoding, updated in place. On an accelerator
                no step reads a value on the host; a static cache also keeps every shape fixed, so a
                decode step can be captured in a CUDA graph.
            document_ids: ``(b, t)`` (or ``(t,)``) integer ids of packed documents (a new
                document starts where the id changes): each token attends only within its
                document, and positions restart at 0 in each one (unless ``positions`` is
                given; with ``attention_mask`` they count its real tokens), so each document's logits
                equal those of the document alone, unpadded.

        Returns:
            ``(b, t, v)`` logits.
        """
        _check_ids(input_ids)
        message = f"input_ids must lie in [0, vocab_size={self.vocab_size})"
        check_values(
            (input_ids >= 0) & (input_ids < self.vocab_size),
            message,
            lambda: f"{message}, got values from {int(input_ids.min())} to {int(input_ids.max())}",
        )
        if isinstance(cache, KVCache):  # (anything else is refused by name in _prepare)
            cache.bind(self.num_layers)
        distinct = self._distinct()
        firsts = [self.layer_encoding.index(i) for i in range(len(distinct))]  # each one's first layer
        key_mask, document_ids, states = _prepare(
            input_ids, distinct, positions, attention_mask, document_ids, cache, 0, firsts
        )
        x = self.embed(input_ids)
        if self.embed_scale is not None:
            x = x * self.embed_scale
        if self.encoding is not None:
            # Default positions stay None for the additive encoding: it then slices its cache, and
            # under torch.compile a learned table still checks the length (explicit positions are data).
            # Not with a cache: a grid table reads a call's tokens as a grid (4 tokens: 2 x 2), not as
            # the first tokens of its own grid, which the next calls' positions index.
            first = states[0].q_start == 0 and cache is None
            x = self.encoding.encode_input(x, None if first else states[0].q_positions)
        x = self.embed_dropout(x)
        shared = dict(attention_mask=key_mask, cache=cache, document_ids=document_ids)
        for i, block in enumerate(self.blocks):
            x = block(x, layer=i, state=states[self.layer_encoding[i]], **shared)
        return self.head(self.norm(x))

    @torch.no_grad()
    def generate(
        self,
        input_ids: Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        do_sample: bool = False,
        generator: torch.Generator | None = None,
        attention_mask: Tensor | None = None,
    ) -> Tensor:
        """Continue ``input_ids`` by ``max_new_tokens`` tokens, decoding with a :class:`KVCache`.

        Args:
            input_ids: ``(b, t)`` prompt ids, ``t >= 1``.
            max_new_tokens: how many tokens to add (>= 0).
            temperature: divides the logits before sampling (a finite number > 0; tiny values
                approach greedy decoding without overflowing); ignored when greedy.
            top_k: sample only among the ``top_k`` most likely tokens.
            do_sample: sample (``True``) or take the argmax (``False``, greedy).
            generator: random generator for sampling, for reproducible samples.
            attention_mask: ``(b, t)`` keep-mask of a padded prompt (left padding is usual;
                right padding works too: new tokens get the next positions of each row).

        Returns:
            ``(b, t + max_new_tokens)`` ids: the prompt followed by the new tokens.
        """
        if not self.causal:
            raise ValueError(
                "generate needs a causal model (causal=True); this TransformerLM is bidirectional"
            )
        check_int("max_new_tokens", max_new_tokens, minimum=0)
        temperature = check_positive_float("temperature", temperature)
        check_bool("do_sample", do_sample)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        if top_k is not None:
            check_positive_int("top_k", top_k)
        if _check_ids(input_ids).shape[1] == 0:
            raise ValueError(
                f"input_ids is an empty prompt (shape {tuple(input_ids.shape)}); generate needs at least one token"
            )
        if max_new_tokens == 0:
            return input_ids
        cache = KVCache()
        tokens = [input_ids]
        for _ in range(max_new_tokens):  # the prompt, then each new token; the mask checked by the first
            out = self(tokens[-1], attention_mask=attention_mask, cache=cache)
            if len(tokens) == 1 and attention_mask is not None:  # each row's last real token (right padding)
                last = attention_mask.long().cumsum(-1).argmax(-1)  # (b,): the first index of the last count
                logits = out[torch.arange(out.shape[0], device=out.device), last].float()
            else:
                logits = out[:, -1].float()
            if do_sample:
                # Shift by the row maximum before dividing: a tiny temperature then sends the
                # others to -inf (greedy in the limit) instead of overflowing to inf - inf = NaN.
                logits = (logits - logits.amax(dim=-1, keepdim=True)).double() / temperature
                if top_k is not None and top_k < logits.shape[-1]:
                    kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                new = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
            else:
                new = logits.argmax(dim=-1, keepdim=True)
            tokens.append(new)
            if attention_mask is not None:
                attention_mask = torch.cat([attention_mask, attention_mask.new_ones(new.shape)], dim=-1)
        return torch.cat(tokens, dim=-1)


def _check_ids(input_ids: Tensor) -> Tensor:
    """``input_ids`` if it is a ``(b, t)`` integer tensor (``ValueError``/``TypeError`` otherwise)."""
    if not isinstance(input_ids, Tensor) or input_ids.dim() != 2:
        shape = tuple(input_ids.shape) if isinstance(input_ids, Tensor) else type(input_ids).__name__
        raise ValueError(f"input_ids must be a (batch, seq) tensor of token ids, got {shape}")
    if input_ids.dtype not in (torch.int32, torch.int64):  # (what an embedding indexes with)
        raise TypeError(
            f"input_ids must be an integer tensor of dtype int64 or int32, got dtype {input_ids.dtype}"
        )
    return input_ids
