"""Tiny randomly initialised decoders of ten families and an offline tokenizer, built from configs.

Usage (tests): ``model = build_tiny_model("llama", vocab=len(tokenizer))``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

CORPUS = [
    "A man is playing a guitar.",
    "Someone plays music on a stage.",
    "The cat sits on the mat.",
    "Dogs run in the park after the rain.",
    "Stocks fell sharply today amid fears of inflation.",
    "The new phone has a bigger screen and a faster chip.",
    "She cooked pasta with tomatoes and basil for dinner.",
    "Scientists found water ice near the moon's south pole.",
]


def _configs(vocab: int) -> dict[str, Callable[[], object]]:
    from transformers import (
        BloomConfig,
        FalconConfig,
        Gemma2Config,
        Gemma3TextConfig,
        GPT2Config,
        GPTNeoXConfig,
        LlamaConfig,
        MistralConfig,
        OPTConfig,
        Phi3Config,
        Qwen2Config,
        Qwen3Config,
    )

    common = {"vocab_size": vocab, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4}
    gqa = {**common, "num_key_value_heads": 2, "intermediate_size": 96, "max_position_embeddings": 256}
    return {
        "llama": lambda: LlamaConfig(**gqa),
        "mistral": lambda: MistralConfig(**gqa, sliding_window=7),
        "qwen2": lambda: Qwen2Config(**gqa),
        "qwen3": lambda: Qwen3Config(**gqa, head_dim=16),
        "gemma2": lambda: Gemma2Config(
            **gqa, head_dim=16, query_pre_attn_scalar=16, sliding_window=7, attn_logit_softcapping=50.0
        ),
        "gemma3_text": lambda: Gemma3TextConfig(
            **gqa, head_dim=16, query_pre_attn_scalar=16, sliding_window=7
        ),
        "phi3": lambda: Phi3Config(**gqa, pad_token_id=1),
        "gpt2": lambda: GPT2Config(vocab_size=vocab, n_embd=64, n_layer=4, n_head=4, n_positions=256),
        "gpt_neox": lambda: GPTNeoXConfig(
            **common, intermediate_size=96, rotary_pct=0.5, max_position_embeddings=256
        ),
        "bloom": lambda: BloomConfig(vocab_size=vocab, hidden_size=64, n_layer=4, n_head=4),
        "falcon": lambda: FalconConfig(
            vocab_size=vocab,
            hidden_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            alibi=False,
            multi_query=False,
            new_decoder_architecture=False,
        ),
        "falcon-mq": lambda: FalconConfig(
            vocab_size=vocab,
            hidden_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            alibi=False,
            multi_query=True,
        ),
        "falcon-gqa": lambda: FalconConfig(
            vocab_size=vocab,
            hidden_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_kv_heads=2,
            alibi=False,
            new_decoder_architecture=True,
        ),
        "opt": lambda: OPTConfig(
            vocab_size=vocab,
            hidden_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            ffn_dim=96,
            word_embed_proj_dim=64,
            max_position_embeddings=256,
        ),
    }


#: families that bypass transformers' attention interface (valuelens reads their values from the
#: fused q/k/v projection instead)
FALLBACK_ARCHITECTURES = ["bloom", "falcon", "falcon-mq", "falcon-gqa"]

ARCHITECTURES = [
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma2",
    "gemma3_text",
    "phi3",
    "gpt2",
    "gpt_neox",
    "opt",
]


def build_tokenizer():
    """A byte-level BPE tokenizer trained on :data:`CORPUS` (a fast tokenizer with offsets)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<unk>", "<pad>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(CORPUS * 10, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>"
    )


_MODELS: dict[tuple[str, str], torch.nn.Module] = {}


def build_tiny_model(arch: str, vocab: int, *, head: bool = True) -> torch.nn.Module:
    """A randomly initialised tiny decoder of family ``arch`` (seeded; fp32; eval mode)."""
    from transformers import AutoModel, AutoModelForCausalLM

    key = (arch, "lm" if head else "base")
    if key not in _MODELS:
        config = _configs(vocab)[arch]()
        torch.manual_seed(1234)
        factory = AutoModelForCausalLM if head else AutoModel
        model = factory.from_config(config, dtype=torch.float32)
        # random init gives tiny weights; make attention patterns non-uniform so tests can tell recipes apart
        with torch.no_grad():
            for name, param in model.named_parameters():
                if param.dim() == 2 and "embed" not in name and "wte" not in name and "wpe" not in name:
                    param.mul_(3.0)
        _MODELS[key] = model.eval()
    return copy.deepcopy(_MODELS[key])


def save_tiny_model(path, arch: str = "llama"):
    """Save a tiny random ``arch`` decoder and the tiny tokenizer as a Hugging Face folder; return ``path``."""
    tokenizer = build_tokenizer()
    build_tiny_model(arch, len(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


#: The tiny llama's key (what presets and ``layers="auto"`` are keyed on).
TINY_LLAMA_KEY = ("llama", 4, 64)


def tune_tiny_preset(monkeypatch, path, tmp_path) -> dict:
    """Give the tiny llama at ``path`` a tuned ``preset="best"`` shaped like SmolLM2's (``drop_prefix`` and
    a state fitted for the entry's spec) for the test's duration; return the entry's fields."""
    from valuelens import Encoder, fit_texts, presets

    fields = {"recipe": "aligned-wva", "prompt": "futureeol", "layers": [2, 3], "drop_prefix": True}
    raw = Encoder.from_pretrained(path, device="cpu", **fields)
    state = fit_texts(raw, CORPUS, kind="center").save(tmp_path / "tiny-best.safetensors")
    entry = {**fields, "postprocess": str(state)}
    monkeypatch.setitem(presets.PRESETS, TINY_LLAMA_KEY, {"best": entry})
    return entry
