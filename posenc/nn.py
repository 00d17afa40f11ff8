"""Attention layers and a small transformer whose position encoding is a config string.

``position`` is anything :func:`posenc.build` accepts (``"rope"``, ``"alibi"``,
``"rope(scaling={'rope_type': 'yarn', 'factor': 4.0})"``, a dict, or a built module), so
swapping encodings changes nothing else in the model code::

    model = posenc.nn.TransformerLM(vocab_size=256, d_model=128, num_layers=2, num_heads=4,
                                    position="alibi", max_len=512)
    logits = model(input_ids)                          # (b, t, vocab)
    out = model.generate(input_ids, max_new_tokens=20)  # (b, t + 20)

Shape key: ``b`` batch, ``t`` new tokens, ``tk`` all keys (cached + new), ``d`` model
width, ``h`` heads, ``dh`` head width, ``v`` vocabulary.
"""

from __future__ import annotations

from typing import Any

import torch
from einops import rearrange
from torch import Tensor, nn

from ._checks import check_bool, check_positive_int
from .attention import attention
from .base import PositionalEncoding, PositionState, mask_to_positions
from .registry import build

__all__ = ["KVCache", "MultiheadAttention", "TransformerBlock", "TransformerLM"]


class KVCache:
    """Keys, values, key positions and key padding of every layer, for incremental decoding.

    Pass one (empty) cache to :meth:`TransformerLM.forward` or
    :meth:`MultiheadAttention.forward`; each call appends the new tokens' keys and values
    (after the encoding's ``encode_qk``, so cached keys are never rotated twice) and returns
    attention over everything cached so far. Layers are indexed by ``layer``.

    Attributes:
        keys, values: per layer, ``(b, h_kv, tk, dh)`` tensors (empty list before the first call).
        positions: per layer, ``(b, tk)`` long key positions.
    """

    def __init__(self) -> None:
        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []
        self.positions: list[Tensor] = []

    def length(self, layer: int = 0) -> int:
        """The number of cached tokens of ``layer`` (0 before the first call)."""
        return self.keys[layer].shape[-2] if layer < len(self.keys) else 0

    def __len__(self) -> int:
        return self.length(0)

    def key_positions(self, layer: int, positions: Tensor) -> Tensor:
        """The positions of every key after appending ``positions`` ``(t,)``/``(b, t)`` to ``layer``.

        Returns:
            ``(b, tk)`` (or ``(t,)`` for an empty cache and 1-D positions).
        """
        if layer >= len(self.positions):
            return positions
        past = self.positions[layer]
        if past.dim() != positions.dim():
            b = max(
                past.shape[0] if past.dim() == 2 else 1, positions.shape[0] if positions.dim() == 2 else 1
            )
            past, positions = past.expand(b, -1), positions.expand(b, -1)
        return torch.cat([past, positions], dim=-1)

    def update(self, layer: int, k: Tensor, v: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Append ``k``, ``v`` ``(b, h_kv, t, dh)`` and their ``(b, t)`` positions; return everything cached.

        Returns:
            ``(keys, values, positions)`` of shapes ``(b, h_kv, tk, dh)``, ``(b, h_kv, tk, dv)``, ``(b, tk)``.
        """
        if layer > len(self.keys):
            raise ValueError(
                f"layer {layer} updated before layer {len(self.keys)}: layers must be filled in order"
            )
        if layer < len(self.keys) and self.positions[layer].dim() != positions.dim():
            # A (t,) positions tensor joins a (b, t) history (or the reverse): make both (b, t).
            b = k.shape[0]
            self.positions[layer] = self.positions[layer].expand(b, -1)
            positions = positions.expand(b, -1)
        if layer == len(self.keys):
            self.keys.append(k)
            self.values.append(v)
            self.positions.append(positions)
        else:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)
            self.values[layer] = torch.cat([self.values[layer], v], dim=-2)
            self.positions[layer] = torch.cat([self.positions[layer], positions], dim=-1)
        return self.keys[layer], self.values[layer], self.positions[layer]


def _build_encoding(position: Any, **dims: Any) -> PositionalEncoding:
    return build(position, **{k: v for k, v in dims.items() if v is not None})


class MultiheadAttention(nn.Module):
    """Multi-head (or grouped-query) self-attention whose position encoding is a config string.

    Projects ``x`` to queries, keys and values, applies the encoding's ``encode_qk`` and
    ``attention_bias`` through :func:`posenc.attention`, and projects back. Additive
    encodings (sinusoidal, learned) act on the embeddings, not here:
    :class:`TransformerLM` applies them once; in this layer alone they act nowhere.

    Args:
        d_model: model width ``d``.
        num_heads: query heads ``h``; ``d_model`` must be a multiple of it unless ``head_dim`` is given.
        position: a spec for :func:`posenc.build` or a built encoding (shared as is); ``None``
            for a layer that holds no encoding and is always called with a prepared ``state``
            (how :class:`TransformerLM` builds its blocks: the encoding lives once, at the model).
        causal: each token attends to itself and earlier tokens only.
        dropout: dropout on the attention weights and the output, in training mode.
        bias: whether the projections have biases.
        num_kv_heads: key/value heads for grouped-query attention (default ``num_heads``).
        head_dim: width per head (default ``d_model // num_heads``).
        max_len: the longest sequence, handed to the encoding (required by ``"learned"``).

    Shape:
        ``forward(x)``: ``(b, t, d) -> (b, t, d)``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        position: Any = "rope",
        causal: bool = False,
        dropout: float = 0.0,
        bias: bool = False,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        max_len: int | None = None,
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("num_heads", num_heads)
        if head_dim is None:
            if d_model % num_heads != 0:
                raise ValueError(
                    f"d_model={d_model} must be a multiple of num_heads={num_heads} (or pass head_dim explicitly)"
                )
            head_dim = d_model // num_heads
        check_positive_int("head_dim", head_dim)
        num_kv_heads = num_heads if num_kv_heads is None else check_positive_int("num_kv_heads", num_kv_heads)
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads={num_heads} must be a multiple of num_kv_heads={num_kv_heads}")
        if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be a float in [0, 1), got {dropout!r}")
        check_bool("causal", causal)
        self.d_model, self.num_heads, self.num_kv_heads, self.head_dim = (
            d_model,
            num_heads,
            num_kv_heads,
            head_dim,
        )
        self.causal, self.dropout = causal, float(dropout)
        self.encoding: PositionalEncoding | None = None
        if position is not None:
            self.encoding = _build_encoding(
                position,
                d_model=d_model,
                num_heads=num_heads,
                head_dim=head_dim,
                max_len=max_len,
                causal=causal,
            )
        self.q_proj = nn.Linear(d_model, num_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=bias)
        self.out_proj = nn.Linear(num_heads * head_dim, d_model, bias=bias)
        self.out_dropout = nn.Dropout(dropout)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
            f"head_dim={self.head_dim}, causal={self.causal}"
        )

    def forward(
        self,
        x: Tensor,
        *,
        positions: Tensor | None = None,
        attention_mask: Tensor | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
        state: PositionState | None = None,
    ) -> Tensor:
        """Self-attention over ``x`` (and the cached tokens, with a ``cache``).

        Args:
            x: ``(b, t, d)``.
            positions: ``(t,)`` or ``(b, t)`` positions of the new tokens; default: after the
                cached ones, or :func:`posenc.mask_to_positions` of ``attention_mask``.
            attention_mask: ``(b, tk)`` keep-mask (bool or 0/1) over all keys, cached and new
                (``tk = cached + t``), e.g. a padding mask.
            cache: a :class:`KVCache`, updated in place.
            layer: which of the cache's layers this module uses.
            state: the position state prepared once per forward by the model
                (``encoding.prepare(t, cached + t, q_positions=..., k_positions=...)``); when
                given, ``positions`` is not used. Default: prepared here from this layer's encoding.

        Returns:
            ``(b, t, d)``.
        """
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must have shape (batch, seq, d_model={self.d_model}), got {shape}")
        b, t, _ = x.shape
        past = 0 if cache is None else cache.length(layer)
        key_mask = None
        if attention_mask is not None:
            key_mask = _check_mask(attention_mask, b, past + t)
        if state is None:
            if self.encoding is None:
                raise ValueError(
                    "this MultiheadAttention holds no encoding (position=None): pass the state prepared by "
                    "the model, e.g. state=encoding.prepare(...)"
                )
            state = _prepare(self.encoding, x, positions, key_mask, cache, layer)
        q = rearrange(self.q_proj(x), "b t (h dh) -> b h t dh", h=self.num_heads)
        k = rearrange(self.k_proj(x), "b t (h dh) -> b h t dh", h=self.num_kv_heads)
        v = rearrange(self.v_proj(x), "b t (h dh) -> b h t dh", h=self.num_kv_heads)
        # New keys sit at the queries' positions; they are encoded before caching.
        q, k = state.encode_qk(q, k)
        if cache is not None:
            k, v, _ = cache.update(layer, k, v, state.q_positions)
        attn_mask = None if key_mask is None else key_mask[:, None, None, :]
        out = attention(
            q,
            k,
            v,
            state,
            causal=self.causal,
            attn_mask=attn_mask,
            dropout_p=self.dropout if self.training else 0.0,
            qk_encoded=True,
        )
        return self.out_dropout(self.out_proj(rearrange(out, "b h t dh -> b t (h dh)")))


def _prepare(
    encoding: PositionalEncoding,
    x: Tensor,
    positions: Tensor | None,
    key_mask: Tensor | None,
    cache: KVCache | None,
    layer: int,
) -> PositionState:
    """The position state of one forward over new tokens ``x`` ``(b, t, d)``, cached keys included.

    Default positions continue the cache (``past .. past+t-1``), or come from the padding mask;
    with neither, they stay implicit so that encodings take their contiguous fast paths.
    """
    b, t, _ = x.shape
    past = 0 if cache is None else cache.length(layer)
    if positions is None and key_mask is not None:
        positions = mask_to_positions(key_mask)[:, past:]
    if positions is None and past == 0:
        return encoding.prepare(t, t, batch=b, device=x.device)
    if positions is None:
        positions = torch.arange(past, past + t, device=x.device)
    k_positions = positions if cache is None else cache.key_positions(layer, positions)
    return encoding.prepare(
        t, past + t, q_positions=positions, k_positions=k_positions, batch=b, device=x.device
    )


def _check_mask(attention_mask: Tensor, batch: int, length: int) -> Tensor:
    if not isinstance(attention_mask, Tensor):
        raise TypeError(f"attention_mask must be a (batch, seq) tensor, got {type(attention_mask).__name__}")
    if attention_mask.dtype != torch.bool and attention_mask.is_floating_point():
        raise TypeError(f"attention_mask must be bool or 0/1 integers, got dtype {attention_mask.dtype}")
    if attention_mask.dim() != 2 or tuple(attention_mask.shape) != (batch, length):
        raise ValueError(
            f"attention_mask must have shape (batch, cached + new tokens) = {(batch, length)}, "
            f"got {tuple(attention_mask.shape)}"
        )
    return attention_mask.bool()


class TransformerBlock(nn.Module):
    """A pre-norm transformer block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``.

    Args:
        d_model: model width ``d``.
        num_heads: attention heads.
        position: a spec for :func:`posenc.build` or a built encoding (shared as is); ``None``
            when the model hands every call a prepared ``state``.
        causal: causal self-attention.
        dropout: dropout in attention and after the MLP.
        mlp_ratio: the MLP's hidden width is ``mlp_ratio * d_model``.
        bias: biases in the linear layers.
        num_kv_heads: key/value heads (grouped-query attention).
        max_len: handed to the encoding.
        norm_eps: LayerNorm epsilon.

    Shape:
        ``forward(x)``: ``(b, t, d) -> (b, t, d)``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        position: Any = "rope",
        causal: bool = False,
        dropout: float = 0.0,
        mlp_ratio: float = 4.0,
        bias: bool = False,
        num_kv_heads: int | None = None,
        max_len: int | None = None,
        norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        if not isinstance(mlp_ratio, (int, float)) or isinstance(mlp_ratio, bool) or mlp_ratio <= 0:
            raise ValueError(f"mlp_ratio must be a positive number, got {mlp_ratio!r}")
        hidden = max(1, round(mlp_ratio * d_model))
        self.attn_norm = nn.LayerNorm(d_model, eps=norm_eps, bias=bias)
        self.attn = MultiheadAttention(
            d_model,
            num_heads,
            position,
            causal=causal,
            dropout=dropout,
            bias=bias,
            num_kv_heads=num_kv_heads,
            max_len=max_len,
        )
        self.mlp_norm = nn.LayerNorm(d_model, eps=norm_eps, bias=bias)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, hidden, bias=bias),
            nn.GELU(),
            nn.Linear(hidden, d_model, bias=bias),
            nn.Dropout(dropout),
        )

    def forward(
        self,
        x: Tensor,
        *,
        positions: Tensor | None = None,
        attention_mask: Tensor | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
        state: PositionState | None = None,
    ) -> Tensor:
        """Apply the block; the keyword arguments are :meth:`MultiheadAttention.forward`'s."""
        x = x + self.attn(
            self.attn_norm(x),
            positions=positions,
            attention_mask=attention_mask,
            cache=cache,
            layer=layer,
            state=state,
        )
        return x + self.mlp(self.mlp_norm(x))


class TransformerLM(nn.Module):
    """A small decoder (or encoder) language model whose position encoding is a config string.

    Token embedding, ``encoding.encode_input`` once on the embeddings (additive
    encodings), ``num_layers`` pre-norm :class:`TransformerBlock` s, a final norm and a head
    tied to the embedding. The encoding is built once with the model's sizes (``d_model``,
    ``num_heads``, ``head_dim``, ``max_len``, ``causal``) and held once, by the model
    (``model.encoding``; the blocks hold none, so T5's bias table is one parameter in one
    module, as FSDP needs): each forward prepares its position state once
    (:meth:`~posenc.PositionalEncoding.prepare`: RoPE's cos/sin rows, T5's bias by distance)
    and hands it to every block.

    Args:
        vocab_size: vocabulary size ``v``.
        d_model: model width ``d``.
        num_layers: number of blocks.
        num_heads: attention heads (``d_model`` must be a multiple).
        position: a spec for :func:`posenc.build` (``"rope"``, ``"alibi"``, ``"t5"``,
            ``"sinusoidal"``, ``"learned"``, ``"none"``, ``"rope(base=500000.0)"``, a dict) or
            a built encoding.
        max_len: the longest sequence; required by ``"learned"``, optional otherwise.
        causal: a decoder (``True``) or a bidirectional encoder (``False``).
        dropout: dropout on embeddings, attention weights and block outputs.
        mlp_ratio: MLP hidden width over ``d_model``.
        num_kv_heads: key/value heads (grouped-query attention).
        bias: biases in linear layers and norms.
        tie_embeddings: share the output head's weight with the token embedding.

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
    ) -> None:
        super().__init__()
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("d_model", d_model)
        check_positive_int("num_layers", num_layers)
        check_positive_int("num_heads", num_heads)
        if max_len is not None:
            check_positive_int("max_len", max_len)
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} must be a multiple of num_heads={num_heads}")
        check_bool("causal", causal)
        self.vocab_size, self.d_model, self.num_layers, self.num_heads = (
            vocab_size,
            d_model,
            num_layers,
            num_heads,
        )
        self.max_len, self.causal = max_len, causal
        self.encoding = _build_encoding(
            position,
            d_model=d_model,
            num_heads=num_heads,
            head_dim=d_model // num_heads,
            max_len=max_len,
            causal=causal,
        )
        self.embed = nn.Embedding(vocab_size, d_model)
        self.embed_dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(
                d_model,
                num_heads,
                None,
                causal=causal,
                dropout=dropout,
                mlp_ratio=mlp_ratio,
                bias=bias,
                num_kv_heads=num_kv_heads,
                max_len=max_len,
            )
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model, bias=bias)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_embeddings:
            self.head.weight = self.embed.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # GPT-2's initialisation: small normal weights keep the initial logits near uniform.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(
        self,
        input_ids: Tensor,
        *,
        attention_mask: Tensor | None = None,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Logits for every token.

        Args:
            input_ids: ``(b, t)`` token ids (long).
            attention_mask: ``(b, cached + t)`` keep-mask (bool or 0/1), e.g. for a left- or
                right-padded batch; positions then come from :func:`posenc.mask_to_positions`,
                so every real token gets the same output as in its unpadded sequence.
            positions: ``(t,)`` or ``(b, t)`` explicit positions of the new tokens.
            cache: a :class:`KVCache` for incremental decoding, updated in place.

        Returns:
            ``(b, t, v)`` logits.
        """
        if not isinstance(input_ids, Tensor) or input_ids.dim() != 2:
            shape = tuple(input_ids.shape) if isinstance(input_ids, Tensor) else type(input_ids).__name__
            raise ValueError(f"input_ids must be a (batch, seq) tensor of token ids, got {shape}")
        if input_ids.is_floating_point() or input_ids.dtype == torch.bool:
            raise TypeError(f"input_ids must be an integer tensor, got dtype {input_ids.dtype}")
        b, t = input_ids.shape
        past = 0 if cache is None else cache.length(0)
        key_mask = None if attention_mask is None else _check_mask(attention_mask, b, past + t)
        x = self.embed(input_ids)
        state = _prepare(self.encoding, x, positions, key_mask, cache, 0)
        # Default positions stay None for the additive encoding: it then slices its cache, and
        # under torch.compile a learned table still checks the length (explicit positions are data).
        input_positions = None if state.q_start == 0 else state.q_positions
        x = self.embed_dropout(self.encoding.encode_input(x, input_positions))
        for i, block in enumerate(self.blocks):
            x = block(x, attention_mask=key_mask, cache=cache, layer=i, state=state)
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
            input_ids: ``(b, t)`` prompt ids.
            max_new_tokens: how many tokens to add (>= 0).
            temperature: divides the logits before sampling (> 0); ignored when greedy.
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
        if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be a non-negative int, got {max_new_tokens!r}")
        if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature > 0:
            raise ValueError(f"temperature must be a positive number, got {temperature!r}")
        if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k <= 0):
            raise ValueError(f"top_k must be None or a positive int, got {top_k!r}")
        if not isinstance(input_ids, Tensor) or input_ids.dim() != 2:
            shape = tuple(input_ids.shape) if isinstance(input_ids, Tensor) else type(input_ids).__name__
            raise ValueError(f"input_ids must be a (batch, seq) tensor of token ids, got {shape}")
        if max_new_tokens == 0:
            return input_ids
        b = input_ids.shape[0]
        mask = None if attention_mask is None else _check_mask(attention_mask, b, input_ids.shape[1])
        cache = KVCache()
        tokens = [input_ids]
        step_input = input_ids
        for _ in range(max_new_tokens):
            logits = self(step_input, attention_mask=mask, cache=cache)[:, -1].float()
            if do_sample:
                logits = logits / temperature
                if top_k is not None and top_k < logits.shape[-1]:
                    kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                probs = torch.softmax(logits, dim=-1)
                next_token = torch.multinomial(probs, 1, generator=generator)
            else:
                next_token = logits.argmax(dim=-1, keepdim=True)
            tokens.append(next_token)
            step_input = next_token
            if mask is not None:
                mask = torch.cat([mask, mask.new_ones(b, 1)], dim=-1)
        return torch.cat(tokens, dim=-1)
