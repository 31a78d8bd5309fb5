#!/usr/bin/env bash
# Reproduces this folder: gammatune_cost that never drafts (after its warm-up)
# against no speculation, interleaved paired rounds at batch 4 and 1 on the
# real pair (benchmarks/idle_overhead.py: paired.py plus each engine's CPU
# time), with /proc/loadavg logged beside the rounds (the CPU is shared).
#   bash benchmarks/results/idle_overhead/run.sh [OUT]   (resumable)
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${1:-benchmarks/results/idle_overhead/run}
METHODS=${METHODS:-no_spec,gammatune_cost_never}
mkdir -p "$OUT"
(while true; do echo "$(date +%s) $(cat /proc/loadavg)"; sleep 15; done) >>"$OUT/loadavg.log" &
LOGGER=$!
trap 'kill $LOGGER' EXIT
VLLM_CPU_OMP_THREADS_BIND=0-1 VLLM_CPU_KVCACHE_SPACE=2 VLLM_LOGGING_LEVEL=WARNING \
python benchmarks/idle_overhead.py --out "$OUT" --methods "$METHODS" --baseline no_spec \
    --k 8 --batch-sizes 4,1 --rounds 6 --max-tokens 64 --split eval --per-category 1 --limit 4 \
    --dtype bfloat16
# /proc/loadavg (1-minute) nearest before each round's first batch and after its last
python - "$OUT" <<'PY' | tee "$OUT/loadavg_rounds.md"
import bisect, json, sys
from collections import defaultdict
out = sys.argv[1]
samples = [(float(t), float(a)) for t, a, *_ in (l.split() for l in open(f"{out}/loadavg.log"))]
times = [t for t, _ in samples]
spans = defaultdict(list)
for line in open(f"{out}/paired.jsonl"):
    row = json.loads(line)
    spans[(row["batch_size"], row["round"])] += [row["time"] - row["wall_seconds"], row["time"]]
def load(t):
    return samples[max(bisect.bisect_right(times, t) - 1, 0)][1]
print("| batch | round | loadavg before | loadavg after |\n|---|---|---|---|")
for (size, rnd), ts in sorted(spans.items()):
    print(f"| {size} | {rnd} | {load(min(ts)):.2f} | {load(max(ts) + 15):.2f} |")
PY
