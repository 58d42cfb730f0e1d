"""Randomly initialised models of real shapes (no download): for the GPU script and the 7B memory check.

Usage::

    model = build_random_model("llama-2-7b", dtype=torch.bfloat16, device="cpu", layers=28)
    tokenizer = random_tokenizer(texts, vocab_size=model.config.vocab_size)

The model is built on the meta device and materialised on ``device`` (``to_empty``), so only the
layers asked for take memory; weights are drawn from N(0, 0.02) (norms 1, biases 0) with a fixed
seed, and the rotary tables are computed again on ``device``. The tokenizer is a byte-level BPE
trained on the benchmark texts (token ids below the model's vocabulary): texts get realistic
lengths, not a real model's token ids.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

#: transformers config fields of real models (``model_type`` picks the config class)
SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-0.6b": {
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": True,
    },
    "llama-2-7b": {
        "model_type": "llama",
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "max_position_embeddings": 4096,
    },
    "qwen3-8b": {
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": False,
    },
    # a dry-run shape for CPU checks of the GPU script
    "tiny": {
        "model_type": "llama",
        "vocab_size": 2048,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 1024,
    },
}

_STD = 0.02


def shape_config(name: str, layers: int | None = None) -> Any:
    """The transformers config of shape ``name``, with only ``layers`` decoder layers if given."""
    from transformers import AutoConfig

    if name not in SHAPES:
        msg = f"unknown shape {name!r}: choose from {', '.join(SHAPES)}"
        raise ValueError(msg)
    fields = dict(SHAPES[name])
    if layers is not None:
        fields["num_hidden_layers"] = min(layers, fields["num_hidden_layers"])
    model_type = fields.pop("model_type")
    return AutoConfig.for_model(model_type, **fields)


def build_random_model(
    name: str,
    *,
    dtype: torch.dtype,
    device: str | torch.device,
    layers: int | None = None,
    seed: int = 0,
    attn_implementation: str | None = None,
) -> nn.Module:
    """A backbone (``AutoModel``, no LM head) of shape ``name``, materialised on ``device`` in ``dtype``."""
    from transformers import AutoModel

    config = shape_config(name, layers)
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    with torch.device("meta"):
        model = AutoModel.from_config(config, dtype=dtype, **kwargs)
    model.to_empty(device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for pname, param in model.named_parameters():
            if param.dim() >= 2:
                param.normal_(0.0, _STD, generator=generator)
            elif pname.endswith("bias"):
                param.zero_()
            else:  # norm scales
                param.fill_(1.0)
    _recompute_buffers(model, device)
    return model.eval()


def _recompute_buffers(model: nn.Module, device: str | torch.device) -> None:
    """Non-persistent buffers (rotary tables) are garbage after ``to_empty``: rebuild their modules."""
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if any(not n.startswith("_") for n, _ in child.named_buffers(recurse=False)) and hasattr(
                child, "config"
            ):
                with torch.device(device):
                    setattr(parent, child_name, type(child)(copy.deepcopy(child.config)))


def random_unembedding(model: nn.Module, seed: int = 1) -> torch.Tensor:
    """W_U ``[vocab, hidden]`` for EmbedFilter: the tied input embeddings, else a random matrix of the
    head's shape (on the model's device, in its dtype)."""
    config = model.config.get_text_config()
    embeddings = model.get_input_embeddings().weight
    if getattr(config, "tie_word_embeddings", False):
        return embeddings
    generator = torch.Generator(device=embeddings.device).manual_seed(seed)
    weight = torch.empty(embeddings.shape, dtype=embeddings.dtype, device=embeddings.device)
    return weight.normal_(0.0, _STD, generator=generator)


def random_tokenizer(texts: Sequence[str], vocab_size: int) -> Any:
    """A byte-level BPE tokenizer trained on ``texts`` (at most 8000 tokens, below ``vocab_size``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=min(8000, vocab_size),
        special_tokens=["<unk>", "<pad>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(sorted(set(texts)), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>"
    )
