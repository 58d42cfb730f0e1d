"""CUDA checks (run where a GPU exists, e.g. by bench/gpu_check.sh; CI machines have none)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tiny_models import CORPUS, build_tiny_model
from valuelens import Encoder

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize(
    ("recipe", "fields"),
    [("va", {}), ("wva-lt", {}), ("aligned-wva", {}), ("hs", {}), ("aligned-wva", {"drop_prefix": True})],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_matches_cpu(tiny_tokenizer, recipe, fields, dtype):
    cpu = build_tiny_model("qwen3", len(tiny_tokenizer))
    gpu = build_tiny_model("qwen3", len(tiny_tokenizer)).to("cuda", dtype)
    want = Encoder(cpu, tiny_tokenizer, recipe=recipe, layers="all", prompt="prompteol", **fields).encode(
        CORPUS, normalize=True
    )
    enc = Encoder(gpu, tiny_tokenizer, recipe=recipe, layers="all", prompt="prompteol", **fields)
    got = enc.encode(CORPUS, normalize=True, convert_to_tensor=True)
    assert got.device.type == "cuda" and got.dtype == torch.float32
    cos = (got.cpu().numpy() * want).sum(1)
    assert cos.min() > (0.9999 if dtype == torch.float32 else 0.99)


def test_device_map_model(tmp_path, tiny_tokenizer):
    model = build_tiny_model("llama", len(tiny_tokenizer))
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    want = Encoder(model, tiny_tokenizer, recipe="va", layers="all").encode(CORPUS)
    enc = Encoder.from_pretrained(tmp_path, recipe="va", layers="all", dtype="float32", device_map="auto")
    np.testing.assert_allclose(enc.encode(CORPUS), want, atol=1e-4)
