"""One capture mechanism for every recipe: transformers' attention interface plus module hooks.

Usage::

    plan = CapturePlan(signal="value", pool="mean", layers=(10, 11, 12))
    with capturing(parts, [plan], attention_mask=mask, weights={"mean": w}) as session:
        parts.backbone(input_ids=ids, attention_mask=mask)   # ends after layer 12 (early exit)
    per_layer = session.captures[0].layer_vectors()  # [B, F] fp32 per selected layer, in layer order

Several plans (recipes) can share one forward: each gets its own vectors.

How it works. While at least one capture is active on a model, that model is *instrumented*: its
attention implementation is switched to ``valuelens_sdpa`` (or ``valuelens_eager`` where the model
needs eager attention, e.g. Gemma-2's logit softcapping), a function registered in transformers'
``AttentionInterface`` (with the matching mask function in ``AttentionMaskInterface``) that sees the
exact q/k/v attention uses and then delegates to sdpa/eager; and forward hooks sit on each decoder
layer, output projection and MLP down projection. Every hook and the attention function look up the
*active capture of the calling context* in a ``ContextVar``; a context with no capture passes
through untouched, so threads and async callers can share one model. One forward can serve several
plans at once (e.g. every recipe of an evaluation that uses the same prompt). The first capture
installs the instrumentation and the last one removes it (and restores the attention implementation), in
``finally`` blocks, also when the forward raises.

A capture may also carry edits of the forward (:mod:`valuelens.steering`: Token Prepending from a
pre-hook on each decoder layer, Contrastive Prompting from the output projection's pre-hook); they
apply only to the forward of the context that started the capture, like everything else here.

Hooks reduce tokens to per-sentence fp32 vectors at once, with the recipe math of
:mod:`valuelens.readout`: no ``[B, N, d]`` tensor is kept per layer. Once every plan has its deepest
layer, a hook raises :class:`StopForward`; :func:`capturing` ends the forward there and swallows it
(as baukit's ``TraceDict`` does), so the layers after it never run.

Notes: a model loaded with flash or flex attention runs through sdpa while a capture is active (same
results up to numerics; other callers of the model during that time do too). Families that bypass
the attention interface (Bloom, Falcon) keep their own attention; their value vectors are read from
the fused q/k/v projection (``ModelParts.value_sources``).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar, Token
from typing import Any

from torch import Tensor, nn

from valuelens.architectures import ModelParts
from valuelens.errors import UnsupportedModelError
from valuelens.readout import CapturePlan, reduce_attention, reduce_tokens
from valuelens.recipes import ATTENTION_SIGNALS
from valuelens.steering import NO_EDITS, ForwardEdits

__all__ = [
    "Capture",
    "CaptureHandle",
    "CapturePlan",
    "CaptureSession",
    "StopForward",
    "capturing",
    "is_instrumented",
    "start_capture",
]

_ACTIVE: ContextVar[CaptureSession | None] = ContextVar("valuelens_active_capture", default=None)
_REGISTRY_LOCK = threading.Lock()
_INSTRUMENTED: dict[int, _Instrumentation] = {}
_ATTENTION_NAMES = {"sdpa": "valuelens_sdpa", "eager": "valuelens_eager"}


class StopForward(Exception):
    """Raised by a hook once the deepest selected layer is captured; :func:`capturing` catches it.

    A caller of :func:`start_capture` (no ``with`` block) catches it around its own forward."""


class Capture:
    """The state of one plan in a capture: its pooling weights and the vectors caught so far."""

    def __init__(
        self,
        plan: CapturePlan,
        *,
        weights: Tensor | None,
        index: Tensor | None,
        shape: tuple[int, int],
        key_start: Tensor | None = None,
    ) -> None:
        if plan.pool in ("mean", "position") and weights is None:
            msg = f"pool={plan.pool!r} needs token weights"
            raise ValueError(msg)
        if plan.pool in ("last", "last_attention", "last_heads") and index is None:
            msg = f"pool={plan.pool!r} needs the last-token index"
            raise ValueError(msg)
        if plan.drop_prefix and key_start is None:
            msg = "a plan with drop_prefix needs key_start (where each row's pooled text starts)"
            raise ValueError(msg)
        self.plan = plan
        self.weights = weights
        self.index = index
        self.key_start = key_start
        self._shape = shape
        self._layers = frozenset(plan.layers)
        self._vectors: dict[int, Tensor] = {}

    def wants(self, layer: int | None, signal: str) -> bool:
        return layer is not None and signal == self.plan.signal and layer in self._layers

    def record(self, layer: int, vector: Tensor) -> None:
        self._vectors[layer] = vector

    @property
    def done(self) -> bool:
        return len(self._vectors) == len(self._layers)

    def pool(self, x: Tensor) -> Tensor:
        """Pool ``[B, N, F]`` token features as the plan says (``last`` or weighted).

        Some families flatten tokens before a projection (OPT's ``fc2`` sees ``[B*N, F]``); such
        inputs are viewed back as ``[B, N, F]``.
        """
        if x.dim() == 2:
            x = x.view(*self._shape, -1)
        return reduce_tokens(self.plan.pool, x, weights=self.weights, index=self.index)

    def layer_vectors(self) -> list[Tensor]:
        """Per-layer sentence vectors ``[B, F]`` in the plan's layer order."""
        missing = [layer for layer in self.plan.layers if layer not in self._vectors]
        if missing:
            hint = ""
            if self.plan.signal in ATTENTION_SIGNALS:
                hint = (
                    " The model's attention did not go through transformers' attention interface; recipes "
                    "that read values, queries or keys need a model that does (most decoder families since "
                    "transformers 4.48)."
                )
            msg = f"no {self.plan.signal!r} signal was captured at layers {missing}.{hint}"
            raise UnsupportedModelError(msg)
        return [self._vectors[layer] for layer in self.plan.layers]


class CaptureSession:
    """The captures active in one context on one model; ends the forward once all are complete."""

    def __init__(
        self,
        instrumentation: _Instrumentation,
        captures: tuple[Capture, ...],
        *,
        stop_early: bool,
        edits: ForwardEdits = NO_EDITS,
    ) -> None:
        self.instrumentation = instrumentation
        self.captures = captures
        self.stop_early = stop_early
        self.edits = edits

    def layer_vectors(self) -> list[list[Tensor]]:
        """Per capture (in plan order), its per-layer sentence vectors (:meth:`Capture.layer_vectors`)."""
        return [capture.layer_vectors() for capture in self.captures]

    def check_stop(self) -> None:
        if self.stop_early and all(cap.done for cap in self.captures):
            raise StopForward


# --------------------------------------------------------------------------------------------
# Attention: the registered function
# --------------------------------------------------------------------------------------------


@functools.cache
def _eager_for(module_type: type) -> Callable[..., Any]:
    """The model family's own eager attention (it may differ from the generic one, e.g. softcapping)."""
    modeling = sys.modules.get(module_type.__module__)
    eager = getattr(modeling, "eager_attention_forward", None)
    if eager is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward
    return eager


def _capture_attention(
    delegate: str,
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    **kwargs: Any,
):
    session = _ACTIVE.get()
    if session is not None:
        layer = session.instrumentation.attention_layer(module)
        recorded = False
        for cap in session.captures:
            if (
                layer is not None
                and cap.plan.signal in ATTENTION_SIGNALS
                and cap.wants(layer, cap.plan.signal)
            ):
                reduced = reduce_attention(
                    cap.plan,
                    query,
                    key,
                    value,
                    attention_mask,
                    weights=cap.weights,
                    index=cap.index,
                    attention_kwargs=kwargs,
                    key_start=cap.key_start,
                )
                cap.record(layer, reduced)
                recorded = True
        if recorded:
            session.check_stop()
    if delegate == "eager":
        # torch's stubs give Module.__hash__ an instance signature, so mypy thinks classes unhashable
        return _eager_for(type(module))(module, query, key, value, attention_mask, **kwargs)  # type: ignore[arg-type]
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def _capture_attention_sdpa(module, query, key, value, attention_mask, **kwargs):
    return _capture_attention("sdpa", module, query, key, value, attention_mask, **kwargs)


def _capture_attention_eager(module, query, key, value, attention_mask, **kwargs):
    return _capture_attention("eager", module, query, key, value, attention_mask, **kwargs)


@functools.cache
def _register_attention_functions() -> None:
    """Register the capturing attention functions (and their masks under the same names) once."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

    AttentionInterface.register(_ATTENTION_NAMES["sdpa"], _capture_attention_sdpa)
    AttentionInterface.register(_ATTENTION_NAMES["eager"], _capture_attention_eager)
    AttentionMaskInterface.register(_ATTENTION_NAMES["sdpa"], sdpa_mask)
    AttentionMaskInterface.register(_ATTENTION_NAMES["eager"], eager_mask)


# --------------------------------------------------------------------------------------------
# Module hooks
# --------------------------------------------------------------------------------------------


def _active_for(instrumentation: _Instrumentation) -> CaptureSession | None:
    session = _ACTIVE.get()
    return session if session is not None and session.instrumentation is instrumentation else None


def _layer_hook(
    instrumentation: _Instrumentation, layer: int, module: nn.Module, args: tuple, output: Any
) -> None:
    session = _active_for(instrumentation)
    if session is None:
        return
    hidden = output[0] if isinstance(output, (tuple, list)) else output
    normed = None
    recorded = False
    for cap in session.captures:
        if not cap.wants(layer, "hidden"):
            continue
        if cap.plan.final_norm:
            if normed is None:
                norm = instrumentation.parts.final_norm
                if norm is None:
                    msg = f"{instrumentation.parts.model_type!r} has no final norm to apply (final_norm=True)"
                    raise UnsupportedModelError(msg)
                normed = norm(hidden)
            cap.record(layer, cap.pool(normed))
        else:
            cap.record(layer, cap.pool(hidden))
        recorded = True
    if recorded:
        session.check_stop()


def _record_tokens(instrumentation: _Instrumentation, layer: int, signal: str, tokens: Tensor) -> None:
    session = _active_for(instrumentation)
    if session is None:
        return
    recorded = False
    for cap in session.captures:
        if cap.wants(layer, signal):
            cap.record(layer, cap.pool(tokens))
            recorded = True
    if recorded:
        session.check_stop()


def _layer_pre_hook(
    instrumentation: _Instrumentation, layer: int, module: nn.Module, args: tuple, kwargs: dict
) -> tuple[tuple, dict] | None:
    """Token Prepending: edit the layer's input hidden states (positional or ``hidden_states=``)."""
    session = _active_for(instrumentation)
    prepend = session.edits.prepend if session is not None else None
    if prepend is None or layer not in prepend.layers:
        return None
    if args:
        return (prepend.apply(args[0]), *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": prepend.apply(kwargs["hidden_states"])}


def _out_proj_pre_hook(
    instrumentation: _Instrumentation, layer: int, module: nn.Module, args: tuple
) -> tuple | None:
    session = _active_for(instrumentation)
    if session is None:
        return None
    edited = None
    contrast = session.edits.contrast
    if contrast is not None and contrast.layer == layer:
        edited = (contrast.apply(args[0]), *args[1:])
        args = edited
    _record_tokens(instrumentation, layer, "head", args[0])
    return edited


def _out_proj_hook(
    instrumentation: _Instrumentation, layer: int, module: nn.Module, args: tuple, output: Tensor
) -> None:
    _record_tokens(
        instrumentation, layer, "attn_out", output[0] if isinstance(output, (tuple, list)) else output
    )


def _mlp_pre_hook(instrumentation: _Instrumentation, layer: int, module: nn.Module, args: tuple) -> None:
    _record_tokens(instrumentation, layer, "mlp", args[0])


def _value_source_hook(
    instrumentation: _Instrumentation,
    layer: int,
    extract: Callable[[Tensor], Tensor],
    module: nn.Module,
    args: tuple,
    output: Tensor,
) -> None:
    """Fallback for families that bypass the attention interface: values from the fused projection."""
    values = extract(output)
    _record_tokens(instrumentation, layer, "value", values.reshape(*values.shape[:2], -1))


class _Instrumentation:
    """The hooks and attention switch of one model, shared by every capture active on it."""

    def __init__(self, parts: ModelParts) -> None:
        self.parts = parts
        self._attention_layers = {id(module): i for i, module in enumerate(parts.attentions)}
        self._handles: list[Any] = []
        self._previous_attention: str | None = None
        self.interface_ok = False
        self.users = 0

    def attention_layer(self, module: nn.Module) -> int | None:
        return self._attention_layers.get(id(module))

    def install(self) -> None:
        parts = self.parts
        try:
            for i, layer in enumerate(parts.layers):
                self._handles.append(
                    layer.register_forward_pre_hook(
                        functools.partial(_layer_pre_hook, self, i), with_kwargs=True
                    )
                )
                self._handles.append(layer.register_forward_hook(functools.partial(_layer_hook, self, i)))
                out_proj = parts.out_projs[i]
                self._handles.append(
                    out_proj.register_forward_pre_hook(functools.partial(_out_proj_pre_hook, self, i))
                )
                self._handles.append(
                    out_proj.register_forward_hook(functools.partial(_out_proj_hook, self, i))
                )
                down = parts.mlp_downs[i]
                if down is not None:
                    self._handles.append(
                        down.register_forward_pre_hook(functools.partial(_mlp_pre_hook, self, i))
                    )
            self._switch_attention()
            if not self.interface_ok:
                for i, source in enumerate(parts.value_sources):
                    if source is not None:
                        module, extract = source
                        self._handles.append(
                            module.register_forward_hook(
                                functools.partial(_value_source_hook, self, i, extract)
                            )
                        )
        except BaseException:
            self.uninstall()
            raise

    def _switch_attention(self) -> None:
        backbone: Any = self.parts.backbone  # a transformers PreTrainedModel
        config = getattr(backbone, "config", None)
        can_set = getattr(backbone, "_can_set_attn_implementation", None)
        if config is None or can_set is None or not can_set():
            return
        _register_attention_functions()
        previous = config._attn_implementation
        text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
        needs_eager = previous == "eager" or getattr(text_config, "attn_logit_softcapping", None) is not None
        target = _ATTENTION_NAMES["eager" if needs_eager else "sdpa"]
        if previous != target:
            backbone.set_attn_implementation(target)
            self._previous_attention = previous
        self.interface_ok = True

    def uninstall(self) -> None:
        try:
            if self._previous_attention is not None:
                backbone: Any = self.parts.backbone  # a transformers PreTrainedModel
                backbone.set_attn_implementation(self._previous_attention)
                self._previous_attention = None
        finally:
            while self._handles:
                self._handles.pop().remove()


def _acquire(parts: ModelParts) -> _Instrumentation:
    key = id(parts.backbone)
    with _REGISTRY_LOCK:
        inst = _INSTRUMENTED.get(key)
        if inst is None or inst.parts.backbone is not parts.backbone:
            inst = _Instrumentation(parts)
            inst.install()
            _INSTRUMENTED[key] = inst
        inst.users += 1
        return inst


def _release(inst: _Instrumentation) -> None:
    with _REGISTRY_LOCK:
        inst.users -= 1
        if inst.users == 0:
            _INSTRUMENTED.pop(id(inst.parts.backbone), None)
            inst.uninstall()


def is_instrumented(model: nn.Module) -> bool:
    """True while a capture is active on ``model``'s backbone (its hooks are installed)."""
    from valuelens.architectures import backbone_of

    backbone = backbone_of(model)
    with _REGISTRY_LOCK:
        return any(inst.parts.backbone is backbone for inst in _INSTRUMENTED.values())


class CaptureHandle:
    """An active capture that is not bound to a ``with`` block (for host frameworks' own forwards).

    Usage: ``h = start_capture(parts, plans, ...)``; run the forward; ``h.close()``; read
    ``h.session.captures[i].layer_vectors()``. ``close`` must run in the context that called
    ``start_capture`` (same thread / task).
    """

    def __init__(self, session: CaptureSession, token: Token) -> None:
        self.session = session
        self._token: Token | None = token

    def close(self) -> None:
        if self._token is None:
            return
        token, self._token = self._token, None
        try:
            _ACTIVE.reset(token)
        finally:
            _release(self.session.instrumentation)


def start_capture(
    parts: ModelParts,
    plans: Sequence[CapturePlan],
    *,
    attention_mask: Tensor,
    weights: Mapping[str, Tensor] | None = None,
    index: Tensor | None = None,
    stop_early: bool = True,
    edits: ForwardEdits = NO_EDITS,
) -> CaptureHandle:
    """Activate captures for ``plans`` in the current context and return the handle.

    ``weights`` maps a token pool (``"mean"``, ``"position"``) to its ``[B, N]`` weights; ``index``
    holds each row's last real token. With ``stop_early`` the forward ends (``StopForward``) as soon
    as every plan has all its layers. ``edits`` (:class:`valuelens.steering.ForwardEdits`) edit the
    forward and tell plans with ``drop_prefix`` where each row's text starts.
    """
    if not plans:
        msg = "start_capture needs at least one plan"
        raise ValueError(msg)
    weights = weights or {}
    shape = (int(attention_mask.shape[0]), int(attention_mask.shape[1]))
    captures = tuple(
        Capture(plan, weights=weights.get(plan.pool), index=index, shape=shape, key_start=edits.key_start)
        for plan in plans
    )
    inst = _acquire(parts)
    try:
        fallback = bool(parts.value_sources) and all(source is not None for source in parts.value_sources)
        needs_interface = [
            plan.signal
            for plan in plans
            if plan.signal in ATTENTION_SIGNALS
            and not (
                fallback and plan.signal == "value" and plan.pool not in ("last_attention", "last_heads")
            )
        ]
        if needs_interface and not inst.interface_ok:
            msg = (
                f"{type(parts.backbone).__name__} ({parts.model_type!r}) does not let valuelens set its "
                "attention implementation (it bypasses transformers' AttentionInterface), so recipes "
                f"that read {needs_interface[0]!r} vectors (or need attention probabilities: wva-lt, drop_prefix) "
                "cannot run on it; hidden-state and attention-output recipes (hs, last-token, wmp, wva, "
                "aligned-wva without drop_prefix) still can"
            )
            raise UnsupportedModelError(msg)
        session = CaptureSession(inst, captures, stop_early=stop_early, edits=edits)
        token = _ACTIVE.set(session)
    except BaseException:
        _release(inst)
        raise
    return CaptureHandle(session, token)


@contextlib.contextmanager
def capturing(
    parts: ModelParts,
    plans: Sequence[CapturePlan],
    *,
    attention_mask: Tensor,
    weights: Mapping[str, Tensor] | None = None,
    index: Tensor | None = None,
    stop_early: bool = True,
    edits: ForwardEdits = NO_EDITS,
) -> Iterator[CaptureSession]:
    """Context manager form of :func:`start_capture`: ends the early exit (:class:`StopForward`) raised
    in its body, and removes the hooks in ``finally`` (also on ``KeyboardInterrupt``)."""
    handle = start_capture(
        parts,
        plans,
        attention_mask=attention_mask,
        weights=weights,
        index=index,
        stop_early=stop_early,
        edits=edits,
    )
    try:
        yield handle.session
    except StopForward:
        pass
    finally:
        handle.close()
