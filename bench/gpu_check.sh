#!/usr/bin/env bash
# The GPU check of valuelens: CUDA tests, then speed and peak memory on randomly initialised models.
#
# Needs: a CUDA machine with torch, transformers and sentence-transformers installed (pytest for the
# tests); no network, no model weights, nothing installed. Run from anywhere:
#
#     bash bench/gpu_check.sh            # tables and log in $OUT (default: out/gpu)
#     DRY=1 bash bench/gpu_check.sh      # the same steps on CPU with a tiny shape, in seconds
#
# Writes $OUT/gpu_check.log, $OUT/bench-<shape>.md and .json per shape; finishes in under 6 minutes
# (every step has a time limit).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
export PYTHONPATH=.:shared_core/src:packages/sentence-transformers/src:tests${PYTHONPATH:+:$PYTHONPATH}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}

if [[ -n "${DRY:-}" ]]; then
  SHAPES=(tiny)
  BENCH=(--device cpu --dtype float32 --texts 8 --max-length 64 --batch-size 4 --threads 1)
else
  SHAPES=(qwen3-0.6b llama-2-7b qwen3-8b)
  BENCH=(--device cuda --dtype bfloat16 --texts 64 --max-length 256 --batch-size 64)
fi

{
  date -u +"%Y-%m-%d %H:%M UTC"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $PY -c "import torch, transformers, sentence_transformers as st; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available()); print('transformers', transformers.__version__, 'sentence-transformers', st.__version__)"
  $PY -c "import accelerate" 2>/dev/null || echo "accelerate is not installed: the device_map='auto' test will fail"

  echo "== gpu-marked tests (CUDA vs CPU in fp32/bf16, device_map='auto')"
  if $PY -c "import pytest" 2>/dev/null; then
    timeout 90 $PY -m pytest -q -p no:cacheprovider -m gpu -W "ignore::pytest.PytestConfigWarning" tests/core/test_gpu.py
    echo "pytest exit status: $?"
  else
    echo "pytest is not installed: tests skipped"
  fi

  # one process per shape; every row: a warm-up batch, then one timed batch of 64 SciFact abstracts cut
  # to 256 tokens (no token budget); peak = torch.cuda.max_memory_allocated from the row's start
  for shape in "${SHAPES[@]}"; do
    echo "== benchmark, random $shape"
    timeout 80 $PY -m bench --random-init "$shape" --source scifact --max-tokens-per-batch none \
      "${BENCH[@]}" --json "$OUT/bench-$shape.json" --markdown "$OUT/bench-$shape.md"
    echo "bench exit status: $?"
  done
} 2>&1 | tee "$OUT/gpu_check.log"
