"""benchmarks.run_paired's interleaved rounds, with each engine's CPU time beside its wall time.

    python -m benchmarks.idle_overhead --out benchmarks/runs/idle_overhead/run \\
        --methods no_spec,gammatune_cost_never --baseline no_spec --k 8 \\
        --batch-sizes 4,1 --rounds 6 --max-tokens 64 --split eval --per-category 1 --limit 4
    python -m benchmarks.idle_overhead --out DIR --summary-only

Every argument is ``benchmarks.run_paired``'s, and so is the design (every
engine alive at once in one process, each batch on every engine back to
back, the first engine rotating; rows in ``paired.jsonl``, resumable; wall-clock summary in
``paired.md``). Added: each row's ``cpu_seconds``, the user+system CPU time
of the engine's own processes (its engine core and workers, not the shared
front end) over the batch, and ``cpu.md``: per round and method, CPU seconds
per generated token, and the baseline's over the method's (above 1: the
method spends less CPU per token) with a 95% t-interval over rounds.

Why: on a CPU shared with other jobs, a batch's wall time depends on how
many cores the other jobs took during it (back-to-back batches of one
engine differed by up to 5x at a load average of 10-20 on 2 cores), which
pairing cannot cancel within a few rounds; CPU time is a second reading of
the same work. At a load average of 2-4 it adds nothing: both OpenMP
threads stay busy (spinning while they wait), CPU time is twice the wall
time, and the two ratios agree within 0.003 (``results/idle_overhead``).
Whether it holds up better under heavy load is not measured.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from gammatune_tools.bench import paired_runs
from gammatune_tools.bench.counters import EngineCounts
from gammatune_tools.bench.paired import ROWS_FILE, baseline_first, complete_rounds
from gammatune_tools.bench.prompts import load_prompts
from gammatune_tools.bench.records import read_jsonl
from gammatune_tools.bench.stats import ratio_interval
from gammatune_tools.bench.tables import fmt, format_interval


def descendants() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def cpu_seconds(pids: set[int]) -> float:
    """User + system CPU seconds of ``pids`` (and their threads); gone ones count 0."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


class CpuEngineCounts(EngineCounts):
    """``EngineCounts`` plus the CPU time of the processes this engine
    started: made right after the engine starts, so they are the processes
    no earlier engine claimed."""

    claimed: set[int] = set()

    def __init__(self, llm):
        super().__init__(llm)
        self.pids = descendants() - CpuEngineCounts.claimed
        CpuEngineCounts.claimed |= self.pids

    def read(self) -> dict[str, float]:
        return {**super().read(), "cpu_seconds": cpu_seconds(self.pids)}


def cpu_summary(rows: list[dict], methods: list[str], num_prompts: int) -> list[dict]:
    """Per (batch size, method): CPU seconds per token per complete round, and
    the baseline's (first method's) over the method's, per round."""
    done = complete_rounds(rows, methods, num_prompts)
    sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        if row["round"] in done.get(row["batch_size"], set()):
            key = (row["batch_size"], row["round"], row["method"])
            sums[key][0] += row.get("cpu_seconds", 0.0)
            sums[key][1] += row["output_tokens"]
    summary = []
    for size in sorted(done):
        rounds = sorted(done[size])
        per_token = {m: [sums[(size, r, m)][0] / sums[(size, r, m)][1] for r in rounds]
                     for m in methods}
        for method in methods:
            ratios = [b / m for b, m in zip(per_token[methods[0]], per_token[method])]
            summary.append({"batch_size": size, "method": method, "rounds": len(rounds),
                            "cpu_ms_per_token": [1000 * v for v in per_token[method]],
                            "ratios": ratios,
                            "ratio": ratio_interval(ratios) if method != methods[0] else None})
    return summary


def write_cpu_summary(out: Path, methods: list[str], num_prompts: int,
                      baseline: str | None) -> Path:
    ordered = baseline_first(methods, baseline)
    rows = read_jsonl(out / ROWS_FILE)
    summary = cpu_summary(rows, ordered, num_prompts)
    lines = [f"# CPU time per token against `{ordered[0]}` ({out.name})", "",
             "CPU time: user + system seconds of each engine's engine-core and worker "
             "processes over its timed batches. Ratio: the baseline's CPU seconds per "
             "token over the method's in the same round (above 1: less CPU per token); "
             "mean and 95% t-interval over rounds.", "",
             "| batch | method | rounds | CPU ms/token per round | ratio per round | "
             "mean ratio [95% t-interval] |", "|---|---|---|---|---|---|"]
    for row in summary:
        lines.append(
            f"| {row['batch_size']} | {row['method']} | {row['rounds']} | "
            f"{', '.join(fmt(v, 1) for v in row['cpu_ms_per_token'])} | "
            f"{'-' if row['ratio'] is None else ', '.join(fmt(v, 3) for v in row['ratios'])}"
            f" | {format_interval(row['ratio'])} |")
    path = out / "cpu.md"
    path.write_text("\n".join(lines + [""]))
    (out / "cpu.json").write_text(json.dumps(summary, indent=1))
    return path


def main() -> None:
    argv = sys.argv[1:]
    try:
        paired_runs.main(description=__doc__.splitlines()[0],
                         engine_counts=CpuEngineCounts)
    finally:
        out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else None
        context = None if out is None else out / "context.json"
        if context is not None and context.exists():
            args = json.loads(context.read_text())["args"]
            num_prompts = len(load_prompts(args["dataset"], args["per_category"],
                                           args["split"], args["limit"]))
            print(write_cpu_summary(out, args["methods"].split(","), num_prompts,
                                    args.get("baseline")))


if __name__ == "__main__":
    main()
