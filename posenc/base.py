"""The base class every encoding derives from, and the handling of positions.

Position enters attention in one of three places (see ``DESIGN.md``):

* ``encode_input``   — added to the token embeddings once, before the first block;
* ``encode_qk``      — queries and keys rotated inside every attention layer;
* ``attention_bias`` — an additive term on the attention scores before softmax.

:class:`PositionalEncoding` gives every encoding all three hooks, each a no-op unless the
encoding acts there, so an attention layer can call all of them without asking which
encoding it holds. An encoding writes its attention hooks once, on the :class:`PositionState`
subclass it names in ``state_class``: the base class's hooks build that state and apply it.

The hooks' input checks and the position resolution (:func:`resolve_qk_positions`...) are in
:mod:`posenc._positions`, and the per-forward :class:`PositionState` is in :mod:`posenc.state`.

Shape key used in the docstrings: ``b`` batch, ``h`` heads, ``t`` sequence (``tq`` queries,
``tk`` keys), ``d`` model width, ``dh`` head width.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from ._checks import check_float_tensor, check_int
from ._compat import precise_dtype
from ._positions import Positions, check_qk, resolve_qk
from .state import BiasForm, PositionState, ScoreMod

__all__ = ["PositionalEncoding"]

Kind = Literal["additive", "rotary", "bias", "none"]

#: The hooks a subclass may override; :attr:`PositionalEncoding.overridden_hooks` names those it does.
HOOKS = ("encode_input", "encode_qk", "attention_bias", "value_term", "score_mod")


class PositionalEncoding(nn.Module):
    """Base class of every position encoding: three hooks, each a no-op by default.

    Subclasses set :attr:`kind` and either override the hooks where they act, or write the
    attention hooks once, on a :class:`PositionState` subclass named in :attr:`state_class`,
    which the base class's hooks build and apply. A generic attention layer calls all three and
    never needs to know which encoding it holds::

        x = pe.encode_input(x)                              # once, on the embeddings
        q, k = pe.encode_qk(q, k)                           # in every attention layer
        bias = pe.attention_bias(q, k)                      # None, or added to the scores

    A model with several layers prepares the position state once per forward instead
    (:meth:`prepare`) and hands it to every layer; the hooks are that state, applied once. A
    subclass that overrides an attention hook gets a generic state that calls its hooks back, so
    it is never bypassed.

    Positions are explicit and optional everywhere: integer tensors of shape ``(t,)`` or
    ``(b, t)``, passed by keyword in the attention hooks; ``None`` means ``0..t-1`` for
    inputs, and for attention keys at ``0..tk-1`` with queries at the last ``tq`` of them
    (see :func:`resolve_qk_positions`).

    Caches (cos/sin and bias tables) are non-persistent buffers named in
    :attr:`cache_names`, kept in float32 (float64 after ``.double()``) whatever the module's
    dtype, rebuilt by :meth:`reset_caches` after ``to_empty()``; ``state_dict()`` holds only
    learned parameters.
    """

    #: Where the encoding acts: ``"additive"``, ``"rotary"``, ``"bias"`` or ``"none"``.
    kind: ClassVar[Kind] = "none"
    #: The registered name, set by :func:`posenc.register`.
    registry_name: ClassVar[str | None] = None
    #: Non-persistent cache buffers that follow the device but keep a float32/float64 dtype.
    cache_names: ClassVar[tuple[str, ...]] = ()
    #: Those of :attr:`cache_names` kept in float64 whatever ``.to()`` asks: exact inputs of a
    #: formula, read in a forward instead of copied from the host.
    float64_caches: ClassVar[tuple[str, ...]] = ()
    #: The :class:`PositionState` subclass that holds this encoding's tables and implements its
    #: attention hooks: the base class's hooks build it (:meth:`prepare`) and apply it once, so each
    #: hook is written once, on the state. ``None``: the hooks are the module's own (or no-ops).
    state_class: ClassVar[type[PositionState] | None] = None
    #: Whether :meth:`prepare` returns the generic state (the class overrides an attention hook); set
    #: per class, not looked up at call time, so that compiled code guards on nothing mutable.
    _generic_state: ClassVar[bool] = False
    #: The hooks its :attr:`state_class` implements: the base class's hooks apply the state there.
    _state_hooks: ClassVar[frozenset[str]] = frozenset()
    #: The hooks this class acts at (overrides, or its :attr:`state_class` implements): the
    #: prepared state skips the others.
    overridden_hooks: ClassVar[frozenset[str]] = frozenset()
    #: The constructor options :meth:`extra_repr` shows, in order, each as ``name=value`` (the
    #: attribute's ``repr``); those before a ``"/"`` as bare values, as in a signature.
    repr_names: ClassVar[tuple[str, ...]] = ()
    #: Those of :attr:`repr_names` shown only when they differ from the constructor's default.
    repr_optional: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        state = cls.state_class or PositionState
        cls._state_hooks = frozenset(
            hook for hook in HOOKS if getattr(state, hook, None) is not getattr(PositionState, hook, None)
        )
        overrides = {hook for hook in HOOKS if getattr(cls, hook) is not getattr(PositionalEncoding, hook)}
        cls.overridden_hooks = cls._state_hooks | overrides
        # A subclass that overrides an attention hook (say, a user's ALiBi whose `attention_bias` doubles
        # the bias, or one written beside its `state_class`) must not be bypassed by a prepared state
        # that applies the hook without it: its state calls its hooks back.
        cls._generic_state = bool(overrides - {"encode_input"})

    def encode_input(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Add the position signal to token embeddings.

        Args:
            x: ``(b, t, d)`` embeddings.
            positions: ``(t,)`` or ``(b, t)`` integer positions; ``None`` means ``0..t-1``.

        Returns:
            ``(b, t, d)``, the same dtype as ``x``. The base class returns ``x`` unchanged.
        """
        return x

    def encode_qk(
        self, q: Tensor, k: Tensor, *, q_positions: Tensor | None = None, k_positions: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Encode position into queries and keys (e.g. rotate them).

        Args:
            q: ``(b, h, tq, dh)`` queries.
            k: ``(b, h_kv, tk, dh)`` keys.
            q_positions, k_positions: see :func:`resolve_qk_positions`.

        Returns:
            ``(q, k)`` with the same shapes and dtypes. The base class applies its
            :attr:`state_class`'s :meth:`~PositionState.encode_qk`, else returns them unchanged.
        """
        state = self._hook_state("encode_qk", q, k, q_positions, k_positions)
        return (q, k) if state is None else state.encode_qk(q, k)

    def attention_bias(
        self, q: Tensor, k: Tensor, *, q_positions: Tensor | None = None, k_positions: Tensor | None = None
    ) -> Tensor | None:
        """The additive bias on the attention scores, or ``None`` when the encoding adds none.

        Args:
            q: ``(b, h, tq, dh)`` queries, already encoded by :meth:`encode_qk`. Most encodings
                use only their shape, device and dtype; a content term (Shaw's relative keys,
                ``q . a_K(j - i)``) reads their values, and is then already scaled like the scores.
            k: ``(b, h_kv, tk, dh)`` keys (likewise).
            q_positions, k_positions: see :func:`resolve_qk_positions`.

        Returns:
            ``None``, or a float tensor broadcastable to ``(b, h, tq, tk)``; encodings return
            the smallest form that is exact under softmax (e.g. ``(1, h, 1, tk)``). The base class
            applies its :attr:`state_class`'s :meth:`~PositionState.attention_bias`, else ``None``.
        """
        state = self._hook_state("attention_bias", q, k, q_positions, k_positions)
        return None if state is None else state.attention_bias(q, k)

    def value_term(
        self, probs: Tensor, *, q_positions: Tensor | None = None, k_positions: Tensor | None = None
    ) -> Tensor | None:
        """A term added to the attention output that depends on the attention weights, or ``None``.

        Shaw et al.'s relative values add ``z_i += sum_j probs[i, j] * a_V(j - i)``: the
        attention applies it after softmax (so it needs the weights, and takes its explicit
        path). Encodings without such a term return ``None`` (the base class, unless its
        :attr:`state_class` implements :meth:`~PositionState.value_term`).

        Args:
            probs: ``(b, h, tq, tk)`` attention weights (after softmax and masking).
            q_positions, k_positions: see :func:`resolve_qk_positions`.

        Returns:
            ``None``, or ``(b, h, tq, dv)`` in ``probs``' dtype, added to ``probs @ v``.
        """
        state = self._hook_state("value_term", probs, probs, q_positions, k_positions)
        return None if state is None else state.value_term(probs)

    def score_mod(
        self, q: Tensor, k: Tensor, *, q_positions: Tensor | None = None, k_positions: Tensor | None = None
    ) -> ScoreMod | None:
        """A FlexAttention ``score_mod`` equal to adding :meth:`attention_bias`, or ``None``.

        Encodings that can compute their bias inside the attention kernel return a callable
        ``(score, b, h, q_idx, kv_idx) -> score`` so that no ``(h, tq, tk)`` tensor is stored. The
        base class applies its :attr:`state_class`'s :meth:`~PositionState.score_mod`, else ``None``.
        """
        state = self._hook_state("score_mod", q, k, q_positions, k_positions)
        return None if state is None else state.score_mod(q, k)

    #: ``(tq, tk, batch, device, q_positions, k_positions) -> (q_positions, k_positions, q_start, k_start)``:
    #: the positions, and the first ones of default consecutive ranges (else ``None``). The
    #: multi-axis rotary encodings resolve positions with axes instead.
    _resolve = staticmethod(resolve_qk)
    #: The state :meth:`prepare` returns for a subclass that overrides a hook: one that calls it back.
    _generic_state_class: ClassVar[type[PositionState]] = PositionState

    def prepare(
        self,
        q_len: int,
        k_len: int | None = None,
        *,
        q_positions: Tensor | None = None,
        k_positions: Tensor | None = None,
        batch: int | None = None,
        device: torch.device | str | None = None,
        **options: Any,
    ) -> PositionState:
        """The position state of one forward pass, to hand to every attention layer.

        Args:
            q_len: the number of queries ``tq``.
            k_len: the number of keys ``tk`` (default ``q_len``); with a KV cache, cached + new.
            q_positions, k_positions: ``(t,)`` or ``(b, t)`` integer positions, defaults as in
                :func:`resolve_qk_positions` (keys ``0..tk-1``, queries the last ``tq`` of them). The
                state reads them when used, not a copy: do not change them in place while it is in use.
            batch: the batch size, to check ``(b, t)`` positions against.
            device: where default positions and tables are made (default: the positions' device,
                else the encoding's).
            options: the encoding's own settings, passed to :meth:`prepare_state`: the rotary
                encodings' ``seq_len`` (see :meth:`posenc.RoPE.prepare_state`).

        Returns:
            A :class:`PositionState`; built-in encodings return one holding their tables.
        """
        given = q_positions if q_positions is not None else k_positions
        # a torch.device, as a tensor's: default positions are made there when first read
        if device is None:
            device = given.device if isinstance(given, Tensor) else self._device()
        elif (device := torch.device(device)).index is None and device.type not in ("cpu", "meta"):
            device = torch.empty(0, device=device).device  # "cuda" -> "cuda:0", as a tensor's
        k_len = q_len if k_len is None else k_len
        for name, n in (("q_len", q_len), ("k_len", k_len), ("batch", batch)):
            if n is not None and not isinstance(n, torch.SymInt):  # (a traced length is a SymInt)
                check_int(name, n, minimum=0)
        if not self._generic_state:
            return self._state(q_len, k_len, batch, device, q_positions, k_positions, **options)
        # A subclass that overrides a hook: a generic state, whose methods call back into the hooks.
        qp, kp, q_start, k_start = self._resolve(q_len, k_len, batch, device, q_positions, k_positions)
        try:  # the keywords are still checked: a misspelled one is an error, not ignored
            inspect.signature(self.prepare_state).bind(qp, kp, q_start=q_start, k_start=k_start, **options)
        except TypeError as error:
            raise TypeError(f"{type(self).__name__}.prepare(): {error}") from None
        # Its own state's causal-only rules hold for the hooks it overrides (a causal ALiBi's key-only bias).
        key_only = getattr(self, "key_only_when_causal", False) and getattr(self, "causal", False)
        form: BiasForm | None = "key" if key_only else None
        state = self._generic_state_class(self, qp, kp, q_start=q_start, k_start=k_start, bias_form=form)
        own = self.state_class
        if own is not None and own.causal_only:
            state.causal_only, state.causal_only_reason = True, own.causal_only_reason
        return state

    def _state(
        self,
        q_len: int,
        k_len: int,
        batch: int | None,
        device: torch.device,
        q_positions: Tensor | None,
        k_positions: Tensor | None,
        **options: Any,
    ) -> PositionState:
        """This class's own state (:meth:`prepare_state`, what its built-in hooks read) at the resolved
        positions, never the generic one."""
        qp, kp, q_start, k_start = self._resolve(q_len, k_len, batch, device, q_positions, k_positions)
        return self.prepare_state(qp, kp, q_start=q_start, k_start=k_start, **options)

    def _hook_state(
        self, hook: str, q: Tensor, k: Tensor, q_positions: Tensor | None, k_positions: Tensor | None
    ) -> PositionState | None:
        """The state whose ``hook`` the base class's ``hook`` applies: this class's own (never the
        generic state, which calls the hooks back), or ``None`` where that state does not act.

        ``q`` ``(b, h, tq, dh)`` and ``k`` ``(b, h_kv, tk, dh)`` give the lengths, batch and device;
        for ``value_term`` both are the ``(b, h, tq, tk)`` weights.
        """
        if hook not in self._state_hooks:
            return None
        if hook == "value_term":  # q and k are the weights: k's keys are its last dimension
            check_float_tensor("probs", q, rank=4, shape="(batch, heads, q_len, k_len)")
            k = k.mT
        else:
            check_qk(q, k)  # before the positions: a malformed q or k is named first
        batch = max(q.shape[0], k.shape[0])
        return self._state(q.shape[-2], k.shape[-2], batch, q.device, q_positions, k_positions)

    def prepare_state(
        self, q_positions: Positions, k_positions: Positions, *, q_start: int | None, k_start: int | None
    ) -> PositionState:
        """Build the :attr:`state_class` (default :class:`PositionState`) for resolved positions.

        Called by :meth:`prepare`; ``q_start``/``k_start`` are the first positions of default
        consecutive ranges (``None`` for explicit positions).
        """
        state_class = self.state_class or PositionState
        return state_class(self, q_positions, k_positions, q_start=q_start, k_start=k_start)

    def extra_repr(self) -> str:
        """The options named in :attr:`repr_names`: ``"64, max_len=8"`` for ``Learned(64, max_len=8)``."""
        params = inspect.signature(type(self)).parameters
        parts, bare = [], "/" in self.repr_names
        for name in self.repr_names:
            if name == "/":
                bare = False
                continue
            value = getattr(self, name)
            # an optional one is shown whatever its value where a subclass's constructor dropped it
            if name not in self.repr_optional or name not in params or value != params[name].default:
                parts.append(repr(value) if bare else f"{name}={value!r}")
        return ", ".join(parts)

    def _device(self) -> torch.device:
        # the module's own tensors first, and only then a walk over every submodule (FIRE's MLP): even
        # calling parameters() and buffers() cost ~5 us of a 75 us decode step
        for t in itertools.chain(self._parameters.values(), self._buffers.values()):
            if t is not None:
                return t.device
        for t in itertools.chain(self.parameters(), self.buffers()):
            return t.device
        return torch.device("cpu")

    def reset_caches(self) -> None:
        """Rebuild non-persistent caches, e.g. after ``to_empty()`` from the meta device.

        Each cache is rebuilt on the device and in the dtype its buffer has now. Learned
        parameters are left alone (use ``reset_parameters`` for those).
        """

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> Any:
        # One rule for every encoding's caches: they follow the device of `fn`, and keep float32
        # (float64 when `fn` makes float64, e.g. `.double()`) — never half precision, since
        # angles and biases at large positions would be wrong. Values are recomputed, not
        # converted, whenever the dtype changes or the source is the meta device (to_empty()).
        caches = {n: buf for n in self.cache_names if (buf := self._buffers.get(n)) is not None}
        # None while the rest is converted: nn.Module._apply skips None buffers, and each cache keeps its
        # place, so named_buffers() keeps its registered order through .to() (the FSDP2 test pairs them)
        self._buffers.update(dict.fromkeys(caches))
        try:
            super()._apply(fn, recurse)
        finally:
            self._buffers.update(caches)
        if not caches:
            return self
        ref = next(iter(caches.values()))
        probe = fn(torch.empty(0, dtype=ref.dtype, device=ref.device))
        dtype = precise_dtype(probe.dtype) if probe.is_floating_point() else torch.float32
        device = probe.device
        targets = {
            n: c.dtype if not c.is_floating_point() else torch.float64 if n in self.float64_caches else dtype
            for n, c in caches.items()
        }
        from_meta = ref.device.type == "meta" and device.type != "meta"
        rebuild = from_meta or any(c.dtype != targets[n] for n, c in caches.items())
        for name, c in caches.items():
            new = torch.empty(c.shape, dtype=targets[name], device=device) if rebuild else c.to(device)
            self._buffers[name] = new
        if rebuild and device.type != "meta":
            self.reset_caches()
        return self

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The drop-in call. An additive encoding's is :meth:`encode_input`: ``x = pe(x, positions)``,
        ``(b, t, d) -> (b, t, d)``; the other kinds define their own (``q, k = rope(q, k)``,
        ``scores = alibi(scores)``)."""
        if self.kind != "additive":  # pragma: no cover - every other built-in defines its own
            raise NotImplementedError(f"{type(self).__name__} does not define a drop-in forward")
        return self.encode_input(*args, **kwargs)
