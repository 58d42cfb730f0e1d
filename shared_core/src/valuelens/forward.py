"""One forward pass with capture: a batch in, one ``[B, dim]`` vector per readout out, with the spec's
edits of the forward (Token Prepending, Contrastive Prompting) applied and the hooks removed after.

Usage::

    runner = ForwardPass(model, locate(model), config)       # config: a resolved EncoderConfig
    vectors = runner.run(reader.collate(items), readouts)     # one tensor per readout
    with runner.capture(mask, batch, readouts) as session:    # hosts that run the forward themselves
        model(**inputs)
    per_layer = session.layer_vectors()

It knows the model, its located parts and the forward edits; not texts (:class:`~valuelens.tokenization.
TextReader`), nor what a vector is made of (:class:`~valuelens.composition.Composition`).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from valuelens.architectures import ModelParts, locate
from valuelens.capture import CaptureSession, capturing
from valuelens.config import EncoderConfig
from valuelens.errors import ConfigError
from valuelens.readout import CapturePlan, Readout, pooling_inputs
from valuelens.steering import EditPlan
from valuelens.tokenization import Batch

__all__ = ["ForwardPass"]


class ForwardPass:
    """The forward pass of one model under one resolved spec's edits (see the module docstring)."""

    def __init__(self, model: nn.Module, parts: ModelParts, config: EncoderConfig) -> None:
        self.model = model
        self.parts = parts
        self.contrast_layer = config.contrast_layer
        self.edit_plan = EditPlan.from_config(config)
        """The forward edits the spec makes (Token Prepending, Contrastive Prompting), built once."""
        self._pass_positions = "position_ids" in inspect.signature(parts.backbone.forward).parameters

    @property
    def device(self) -> torch.device:
        """Where inputs go: the device of the input embeddings."""
        backbone: Any = self.parts.backbone  # a transformers PreTrainedModel
        return backbone.get_input_embeddings().weight.device

    @property
    def key(self) -> tuple[Any, ...]:
        """Passes with equal keys run the same forward (same backbone, same edits): they can be shared."""
        return (id(self.parts.backbone), self.edit_plan)

    def current_parts(self) -> ModelParts:
        """The model's parts, located again only if an adapter (e.g. LoRA) replaced modules in place."""
        if not self.parts.current():
            self.parts = locate(self.model)
        return self.parts

    def model_inputs(self, batch: Batch, device: torch.device) -> dict[str, Any]:
        """The backbone's keyword arguments for ``batch`` (positions only where the model takes them)."""
        inputs: dict[str, Any] = {
            "input_ids": batch.input_ids.to(device),
            "attention_mask": batch.attention_mask.to(device),
            "use_cache": False,
        }
        if self._pass_positions:
            inputs["position_ids"] = batch.position_ids.to(device)
        return inputs

    @contextlib.contextmanager
    def capture(
        self,
        attention_mask: Tensor,
        batch: Batch | None,
        readouts: Sequence[Readout],
        *,
        stop_early: bool = True,
    ) -> Iterator[CaptureSession]:
        """Capture ``readouts`` during a forward run in the ``with`` body, pooling over ``batch``'s spans
        with the spec's edits (``batch=None``: every real token, no edits); hooks are removed on exit.
        Contrastive Prompting's auxiliary pass runs here, before the body."""
        device = attention_mask.device
        if batch is None:
            start = torch.zeros(attention_mask.shape[0], dtype=torch.long, device=device)
            end = torch.full_like(start, attention_mask.shape[1])
            marker = aux = None
        else:
            start, end = batch.span_start.to(device), batch.span_end.to(device)
            marker, aux = batch.marker, batch.aux
        weights, index = pooling_inputs(attention_mask, start, end, {r.plan.pool for r in readouts})
        aux_heads = self.contrast_heads(aux) if aux is not None else None
        try:
            edits = self.edit_plan.for_batch(
                index=index, span_start=start, marker=marker, aux_heads=aux_heads
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        with capturing(
            self.current_parts(),
            [r.plan for r in readouts],
            attention_mask=attention_mask,
            weights=weights,
            index=index,
            stop_early=stop_early,
            edits=edits,
        ) as session:
            yield session

    def contrast_heads(self, aux: Batch) -> Tensor:
        """Contrastive Prompting's first step: run the auxiliary-prompt rows ``aux`` up to
        ``contrast_layer`` and return the last token's head outputs there, ``[B, H*D]`` fp32."""
        layer = self.contrast_layer
        assert layer is not None
        plan = CapturePlan(signal="head", pool="last", layers=(layer,))
        inputs = self.model_inputs(aux, self.device)
        mask = inputs["attention_mask"]
        _, index = pooling_inputs(mask, aux.span_start.to(mask.device), aux.span_end.to(mask.device), ())
        edits = self.edit_plan.prepend_only(index=index, marker=aux.marker)
        with capturing(
            self.current_parts(), [plan], attention_mask=mask, index=index, edits=edits
        ) as session:
            self.parts.backbone(**inputs)
        return session.captures[0].layer_vectors()[0]

    def run(self, batch: Batch, readouts: Sequence[Readout]) -> list[Tensor]:
        """One forward pass over ``batch`` for ``readouts``, each giving ``[B, dimension]`` fp32 on the
        model's device; it stops after the deepest layer any readout needs."""
        inputs = self.model_inputs(batch, self.device)
        with self.capture(inputs["attention_mask"], batch, readouts) as session:
            self.parts.backbone(**inputs)
        parts = self.parts
        return [r.finish(v, parts) for r, v in zip(readouts, session.layer_vectors(), strict=True)]
