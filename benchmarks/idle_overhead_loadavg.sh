#!/usr/bin/env bash
# benchmarks.idle_overhead with /proc/loadavg sampled beside the rounds (the CPU
# is shared): gammatune_cost that never drafts (after its warm-up) against no
# speculation, interleaved paired rounds at batch 4 and 1 on the real pair.
# The samples go to LOGS (default: a new temporary folder; give the same LOGS
# again to resume a run), the load before and after each round to
# OUT/loadavg_rounds.md.
#   bash benchmarks/idle_overhead_loadavg.sh [OUT]   (resumable)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-benchmarks/runs/idle_overhead/run}
METHODS=${METHODS:-no_spec,gammatune_cost_never}
LOGS=${LOGS:-$(mktemp -d -t idle_overhead-logs-XXXXXX)}
mkdir -p "$OUT" "$LOGS"
echo "load average samples: $LOGS/loadavg.log" >&2
(while true; do echo "$(date +%s) $(cat /proc/loadavg)"; sleep 15; done) >>"$LOGS/loadavg.log" &
LOGGER=$!
trap 'kill $LOGGER' EXIT
VLLM_CPU_OMP_THREADS_BIND=0-1 VLLM_CPU_KVCACHE_SPACE=2 VLLM_LOGGING_LEVEL=WARNING \
python -m benchmarks.idle_overhead --out "$OUT" --methods "$METHODS" --baseline no_spec \
    --k 8 --batch-sizes 4,1 --rounds 6 --max-tokens 64 --split eval --per-category 1 --limit 4 \
    --dtype bfloat16
# /proc/loadavg (1-minute) nearest before each round's first batch and after its last
python - "$OUT" "$LOGS/loadavg.log" <<'PY' | tee "$OUT/loadavg_rounds.md"
import bisect, json, sys
from collections import defaultdict
out, log = sys.argv[1], sys.argv[2]
samples = [(float(t), float(a)) for t, a, *_ in (l.split() for l in open(log))]
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
