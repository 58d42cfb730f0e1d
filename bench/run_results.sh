#!/usr/bin/env bash
# Regenerates research/results/*.{md,json}: every table of research/results/README.md (and the tables of docs/results.md and README.md) comes from these commands.
# Usage: bash bench/run_results.sh [sts|final|meta|other] [MODEL ...]   (default: all parts, the three bundled models)
# Costs on the 2-core CPU machine (measured): sts 10-20 min per model (Qwen2.5-0.5B: 20), final a few
# minutes, other 20-45 min (Qwen2.5-0.5B: 109 min), meta (eight ~100-token prompts per text) ~25 min for SmolLM2 on the sample.
# Two parts can run side by side, one thread each (sklearn's fits are single-threaded anyway), e.g.
#   OMP_NUM_THREADS=1 bash bench/run_results.sh other gemma3-270m & OMP_NUM_THREADS=1 bash bench/run_results.sh other qwen2.5-0.5b
# Measured that way: gemma-3-270m other 69 min. Qwen2.5-0.5B other is ~3.5 h single-threaded (projected: stopped
# after 79 min, a third into scifact-reranking, whose 600 long abstracts take most of an other run).
# A long part can run in pieces: the same command with a subset of OTHER's tasks and another --out, then
#   .venv/bin/python bench/merge_reports.py PIECE1.json PIECE2.json --out research/results/MODEL-other
# (each task's seeded sample does not depend on the other tasks; the joined report prints both commands).
# research/results/qwen2.5-0.5b-other was made that way, alone on both cores: the five non-SciFact tasks (36 min),
# then the two SciFact ones (73 min), each piece's report copied to /tmp/rr/ and joined there.
set -euo pipefail
cd "$(dirname "$0")/.."
V=.venv/bin/valuelens
EF="hs+ef2,hs+ef4,last-token+ef2,last-token+ef4,wmp+ef2,wmp+ef4,aligned-va+ef2,aligned-va+ef4"
EF="$EF,aligned-wva:prompteol+ef2,aligned-wva:prompteol+ef4,aligned-wva:futureeol+ef2,aligned-wva:futureeol+ef4"
EF="$EF,prompteol+ef2,prompteol+ef4,futureeol+ef2,futureeol+ef4,echo+ef2,echo+ef4,prompteol+trunc2,prompteol+rand2"
BASE="hs,hs@all,last-token,wmp,va,va@all,va@half,wva-lt,aligned-va,wva:prompteol,wva:futureeol"
BASE="$BASE,aligned-wva:prompteol,aligned-wva:futureeol,prompteol,futureeol,echo"
FINAL="hs-final,hs-final+ef2,hs-final+ef4"
# MetaEOL runs on a seeded 500-pair sample of STS-B test (eight long prompts per text cost ~8x a PromptEOL
# pass); the one-pass recipes it is compared with run again on the same sample in the same report.
META="metaeol,metaeol+ef2,metaeol+ef4,aligned-wva:metaeol,aligned-wva:futureeol,prompteol"
OTHER="banking77:1000 banking77-clustering:1000 emotion:1000 emotion-clustering:1000 stsb-pairs scifact-reranking:30 scifact:20"

part=${1:-all}
[ $# -gt 0 ] && shift
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=(smollm2-135m gemma3-270m qwen2.5-0.5b)
for m in "${MODELS[@]}"; do
  if [ "$part" = sts ] || [ "$part" = all ]; then
    $V eval stsb lee --model "$m" --recipes "$BASE,$EF" --reference --time-sample 64 --out "research/results/$m-sts"
  fi
  if [ "$part" = final ] || [ "$part" = all ]; then
    # the mean of last_hidden_state (after the final norm): plain mean pooling, the issue's HS baseline
    $V eval stsb lee --model "$m" --recipes "$FINAL" --time-sample 64 --out "research/results/$m-final"
  fi
  if [ "$part" = meta ] || [ "$part" = all ]; then
    $V eval stsb:500 lee --model "$m" --recipes "$META" --time-sample 16 --out "research/results/$m-meta"
  fi
  if [ "$part" = other ] || [ "$part" = all ]; then
    # shellcheck disable=SC2086
    $V eval $OTHER --model "$m" --recipes "$BASE,$EF" --reference --time-sample 0 --out "research/results/$m-other"
  fi
done
