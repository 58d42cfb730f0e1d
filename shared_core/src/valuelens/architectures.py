"""Where each decoder family keeps its parts: layers, attention, output projection, MLP, final norm.

Usage: ``parts = locate(model)``; ``parts.layers[i]``, ``parts.out_projs[i]``, ``parts.value_dim``.

Families differ only in attribute names (``self_attn``/``attn``/``attention``; ``o_proj``/``dense``/
``out_proj``/``c_proj``; ``down_proj``/``fc2``/``c_proj``/``dense_4h_to_h``), so one search over those
names covers llama, mistral, qwen2/3, gemma2/3, phi3, gpt2, gpt_neox, opt and most of their relatives.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from valuelens.errors import UnsupportedModelError

_LAYER_PATHS = ("layers", "h", "decoder.layers", "blocks", "transformer.h", "model.layers", "gpt_neox.layers")
_ATTENTION_NAMES = ("self_attn", "attn", "attention", "self_attention")
_OUT_PROJ_NAMES = ("o_proj", "out_proj", "dense", "c_proj", "wo", "o")
_MLP_NAMES = ("mlp", "feed_forward", "ffn")
_DOWN_NAMES = ("down_proj", "fc2", "c_proj", "dense_4h_to_h", "w2", "fc_out")
_NORM_PATHS = (
    "norm",
    "ln_f",
    "final_layer_norm",
    "final_layernorm",
    "decoder.final_layer_norm",
    "model.norm",
)


def _get_path(root: nn.Module, path: str) -> nn.Module | None:
    module: object = root
    for name in path.split("."):
        module = getattr(module, name, None)
        if module is None:
            return None
    return module if isinstance(module, nn.Module) else None


def _first_child(module: nn.Module, names: tuple[str, ...]) -> nn.Module | None:
    for name in names:
        child = getattr(module, name, None)
        if isinstance(child, nn.Module):
            return child
    return None


#: attribute valuelens sets on a transformers text config when it drops the later decoder layers: the
#: depth the checkpoint was trained with, which ``layers="auto"`` and the presets are keyed on
FULL_DEPTH_ATTR = "valuelens_full_layers"


def full_depth(text_config: Any) -> int:
    """The decoder depth a (text) config was trained with, also after valuelens pruned layers off.

    Usage: ``full_depth(model.config.get_text_config())`` → ``30`` for SmolLM2-135M loaded with 24 layers.
    """
    recorded = getattr(text_config, FULL_DEPTH_ATTR, None)
    return int(recorded) if recorded is not None else int(text_config.num_hidden_layers)


def model_key(text_config: Any) -> tuple[str, int, int]:
    """``(model_type, full depth, hidden_size)``: what ``layers="auto"`` and the presets are keyed on.

    Usage: ``preset_for(*model_key(config.get_text_config()), "best")``.
    """
    return str(text_config.model_type), full_depth(text_config), int(text_config.hidden_size)


@dataclass(frozen=True, eq=False)
class ModelParts:
    """The modules of one decoder-only transformer that valuelens hooks, and its sizes."""

    model_type: str
    backbone: nn.Module
    layers: nn.ModuleList
    attentions: tuple[nn.Module, ...]
    out_projs: tuple[nn.Module, ...]
    mlp_downs: tuple[nn.Module | None, ...]
    final_norm: nn.Module | None
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int | None
    #: for families that bypass transformers' attention interface: per layer, the module whose output
    #: holds the value vectors and a function from that output to values ``[B, N, Hkv, D]``
    value_sources: tuple[tuple[nn.Module, Callable[[Tensor], Tensor]] | None, ...] = ()

    @property
    def n_layers(self) -> int:
        """The decoder layers loaded (fewer than the checkpoint's after pruning: :attr:`full_depth`)."""
        return len(self.layers)

    @property
    def full_depth(self) -> int:
        """The checkpoint's decoder depth, which ``layers="auto"`` and the presets are keyed on."""
        config = getattr(self.backbone, "config", None)
        try:
            return max(full_depth(config.get_text_config()), self.n_layers)  # type: ignore[union-attr]
        except (AttributeError, TypeError, ValueError):  # not a transformers config
            return self.n_layers

    @property
    def model_key(self) -> tuple[str, int, int]:
        """``(model_type, full_depth, hidden_size)``, as :func:`model_key` of its config."""
        return self.model_type, self.full_depth, self.hidden_size

    @property
    def value_dim(self) -> int:
        """Size of the concatenated value vectors (all key/value heads)."""
        return self.n_kv_heads * self.head_dim

    @property
    def head_output_dim(self) -> int:
        """Size of the concatenated per-head attention outputs before W_O (all query heads)."""
        return self.n_heads * self.head_dim

    @property
    def group_size(self) -> int:
        """Query heads per key/value head (GQA)."""
        return self.n_heads // self.n_kv_heads

    def current(self) -> bool:
        """Whether these are still the model's modules (adapters such as LoRA replace projections in
        place; then :func:`locate` must run again)."""
        for layer, attention, out_proj, down in zip(
            self.layers, self.attentions, self.out_projs, self.mlp_downs, strict=False
        ):
            if _first_child(layer, _ATTENTION_NAMES) is not attention:
                return False
            if _first_child(attention, _OUT_PROJ_NAMES) is not out_proj:
                return False
            mlp = _first_child(layer, _MLP_NAMES)
            if down is not None and _first_child(mlp if mlp is not None else layer, _DOWN_NAMES) is not down:
                return False
        return len(self.layers) == len(self.attentions)


def backbone_of(model: nn.Module) -> nn.Module:
    """The base model (no LM head) of a ``*ForCausalLM`` or the model itself."""
    base = getattr(model, "base_model", None)
    if isinstance(base, nn.Module) and base is not model:
        return base
    return model


def _config_int(config: object, *names: str) -> int | None:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _interleaved_values(out: Tensor, n_heads: int, head_dim: int) -> Tensor:
    """Bloom / classic Falcon: per head ``(q, k, v)`` interleaved."""
    return out.view(*out.shape[:2], n_heads, 3, head_dim)[..., 2, :]


def _grouped_values(out: Tensor, n_kv: int, n_heads: int, head_dim: int) -> Tensor:
    """Falcon's new decoder architecture: per key/value group ``(q..., k, v)``."""
    return out.view(*out.shape[:2], n_kv, n_heads // n_kv + 2, head_dim)[..., -1, :]


def _multi_query_values(out: Tensor, n_heads: int, head_dim: int) -> Tensor:
    """Multi-query Falcon: one key and one value head after the query heads."""
    return out.view(*out.shape[:2], n_heads + 2, head_dim)[..., -1:, :]


def _fused_values(
    model_type: str, attention: nn.Module, config: object, n_heads: int, n_kv: int, head_dim: int
):
    """Where Bloom and Falcon (which bypass the attention interface) keep their value vectors.

    The slicers are module-level functions under ``functools.partial`` so that the parts pickle (the
    sentence-transformers multi-process pool sends the model to its workers).
    """
    fused = getattr(attention, "query_key_value", None)
    if fused is None:
        return None
    if model_type == "bloom" or (
        model_type == "falcon"
        and not getattr(config, "multi_query", False)
        and not getattr(config, "new_decoder_architecture", False)
    ):
        return fused, functools.partial(_interleaved_values, n_heads=n_heads, head_dim=head_dim)
    if model_type == "falcon" and getattr(config, "new_decoder_architecture", False):
        return fused, functools.partial(_grouped_values, n_kv=n_kv, n_heads=n_heads, head_dim=head_dim)
    if model_type == "falcon":
        return fused, functools.partial(_multi_query_values, n_heads=n_heads, head_dim=head_dim)
    return None


def locate(model: nn.Module) -> ModelParts:
    """Find the decoder layers and their parts in a Hugging Face decoder model (or its ``*ForCausalLM``)."""
    backbone = backbone_of(model)
    config = getattr(backbone, "config", None) or getattr(model, "config", None)
    if config is None:
        msg = f"{type(model).__name__} has no `config`: pass a Hugging Face transformers model"
        raise UnsupportedModelError(msg)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    model_type = str(getattr(text_config, "model_type", type(backbone).__name__))

    layers = None
    for path in _LAYER_PATHS:
        candidate = _get_path(backbone, path)
        if isinstance(candidate, nn.ModuleList) and len(candidate) > 0:
            layers = candidate
            break
    if layers is None:
        msg = (
            f"cannot find the decoder layers of {type(backbone).__name__} (model_type={model_type!r}): "
            f"looked for a ModuleList at {', '.join(_LAYER_PATHS)}"
        )
        raise UnsupportedModelError(msg)

    attentions, out_projs, downs = [], [], []
    for index, layer in enumerate(layers):
        attention = _first_child(layer, _ATTENTION_NAMES)
        if attention is None:
            msg = (
                f"layer {index} of {model_type!r} has no attention module "
                f"(looked for {', '.join(_ATTENTION_NAMES)})"
            )
            raise UnsupportedModelError(msg)
        out_proj = _first_child(attention, _OUT_PROJ_NAMES)
        if out_proj is None:
            msg = (
                f"the attention of layer {index} of {model_type!r} has no output projection "
                f"(looked for {', '.join(_OUT_PROJ_NAMES)})"
            )
            raise UnsupportedModelError(msg)
        mlp = _first_child(layer, _MLP_NAMES)
        down = _first_child(mlp, _DOWN_NAMES) if mlp is not None else _first_child(layer, _DOWN_NAMES)
        attentions.append(attention)
        out_projs.append(out_proj)
        downs.append(down)

    final_norm = None
    for path in _NORM_PATHS:
        final_norm = _get_path(backbone, path)
        if final_norm is not None:
            break

    hidden = _config_int(text_config, "hidden_size", "n_embd", "d_model")
    n_heads = _config_int(text_config, "num_attention_heads", "n_head")
    if hidden is None or n_heads is None:
        msg = f"the config of {model_type!r} lacks hidden_size / num_attention_heads"
        raise UnsupportedModelError(msg)
    n_kv = _config_int(text_config, "num_key_value_heads", "n_head_kv", "num_kv_heads") or n_heads
    if getattr(text_config, "multi_query", False) and not getattr(
        text_config, "new_decoder_architecture", False
    ):
        n_kv = 1
    head_dim = _config_int(text_config, "head_dim") or hidden // n_heads
    intermediate = _config_int(text_config, "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size")
    if intermediate is None and model_type in ("gpt2", "bloom", "falcon"):
        intermediate = 4 * hidden
    value_sources = ()
    if model_type in ("bloom", "falcon"):
        value_sources = tuple(
            _fused_values(model_type, a, text_config, n_heads, n_kv, head_dim) for a in attentions
        )
    return ModelParts(
        model_type=model_type,
        backbone=backbone,
        layers=layers,
        attentions=tuple(attentions),
        out_projs=tuple(out_projs),
        mlp_downs=tuple(downs),
        final_norm=final_norm,
        hidden_size=hidden,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        intermediate_size=intermediate,
        value_sources=value_sources,
    )
