#!/usr/bin/env bash
# One prepared device check (see the device tool's README): CUDA tests, then speed/memory of the
# capture on randomly initialised models of real sizes (no weights travel to the device machine).
# Usage on the device machine: bash bench/gpu_check.sh   (writes $OUT/gpu_check.log when OUT is set)
set -uo pipefail
cd "$(dirname "$0")/.."
log=${OUT:-/tmp}/gpu_check.log
{
  export PYTHONPATH=shared_core/src:packages/sentence-transformers/src:tests
  python3 -m pip install -q --no-deps -e shared_core 2>/dev/null || true
  nvidia-smi --query-gpu=name,memory.total --format=csv
  python3 -m pytest -q -p no:cacheprovider -m gpu tests/core/test_gpu.py
  python3 bench/gpu_bench.py
} 2>&1 | tee "$log"
