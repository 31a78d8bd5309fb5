#!/usr/bin/env bash
# Reproduces this folder: gammatune_cost that never drafts (after its warm-up)
# against no speculation, interleaved paired rounds at batch 4 and 1 on the
# real pair, with /proc/loadavg logged beside the rounds (the CPU is shared).
#   bash benchmarks/results/idle_overhead/run.sh [OUT]   (resumable)
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${1:-benchmarks/results/idle_overhead/fwd}
METHODS=${METHODS:-no_spec,gammatune_cost_never}
mkdir -p "$OUT"
(while true; do echo "$(date +%s) $(cat /proc/loadavg)"; sleep 15; done) >>"$OUT/loadavg.log" &
LOGGER=$!
trap 'kill $LOGGER' EXIT
VLLM_CPU_OMP_THREADS_BIND=0-1 VLLM_CPU_KVCACHE_SPACE=2 VLLM_LOGGING_LEVEL=WARNING \
python benchmarks/paired.py --out "$OUT" --methods "$METHODS" --baseline no_spec \
    --k 8 --batch-sizes 4,1 --rounds 6 --max-tokens 64 --split eval --per-category 1 --limit 8 \
    --dtype bfloat16
