"""A-B-A comparison: a method's runs between baseline runs, so drift is measured, not assumed.

    python -m benchmarks.diagnostics.aba DIR --baseline no_spec

A diagnostic: no published number uses it (``benchmarks.run_paired`` interleaves
engines in one run and is the measurement the results page cites).

On this CPU a single baseline run moves by 10-25% within an hour, so a ratio
against one baseline run cannot say whether a method is at 1.0x. An A-B-A
sequence (baseline, method, baseline, method, baseline; each run a fresh
engine, written by ``benchmarks.run_bench`` / ``benchmarks.serve_bench`` into
its own sub-directory) compares each method run with the baseline runs just before
and after it: the ratio to their mean, and the interval between the ratios to
each of the two (drift during the run is bounded by its neighbours). The
summary gives the method's mean over the baseline's mean, the baseline's
own spread so a reader sees the noise floor beside the difference, and the
mean of the per-run ratios with a 95% t-interval over the runs (each run
treated as one independent measurement of the ratio; with 2-3 runs the
interval is wide, which is the point).

Reads every ``*/cells.jsonl`` (offline: size = batch size, value = output
tokens/s) and ``*/serve_cells.jsonl`` (served: size = concurrency, value =
output tokens/s from vLLM's client, plus median TPOT) and writes ``aba.md``.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

from gammatune_tools.bench.records import read_jsonl
from gammatune_tools.bench.stats import ratio_interval
from gammatune_tools.bench.tables import fmt, format_interval

#: (results file, where, size field, tok/s field, median TPOT field)
SOURCES = (("cells.jsonl", "offline batch", "batch_size", "tokens_per_second", None),
           ("serve_cells.jsonl", "served concurrency", "concurrency", "output_throughput",
            "median_tpot_ms"))


def collect(directory: Path) -> dict[tuple[str, int], list[dict]]:
    """(where, size) -> every run's cell at that size, in the order they ran."""
    cells: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for file_name, where, size_key, value_key, tpot_key in SOURCES:
        for path in sorted(directory.glob(f"*/{file_name}")):
            for row in read_jsonl(path):
                cells[(where, row[size_key])].append(
                    {"method": row["method"], "started": row["started"],
                     "run": path.parent.name, "value": row[value_key],
                     "tpot": row.get(tpot_key) if tpot_key else None,
                     "target_passes_per_token": row.get("target_passes_per_token"),
                     "draft_forwards_per_token": row.get("draft_forwards_per_token")})
    for runs in cells.values():
        runs.sort(key=lambda cell: cell["started"])
    return cells


def neighbours(runs: list[dict], index: int, baseline: str) -> list[dict]:
    """The baseline runs just before and just after ``runs[index]``."""
    before = [r for r in runs[:index] if r["method"] == baseline][-1:]
    after = [r for r in runs[index + 1:] if r["method"] == baseline][:1]
    return before + after


def report(directory: Path, baseline: str) -> str:
    lines = [f"# A-B-A against `{baseline}` ({directory.name})", "",
             "Each method run against the mean of the baseline runs just before and after "
             "it; [low, high] are its ratios to each of the two.", ""]
    summary = ["## Summary", "",
               f"| where | size | {baseline} runs tok/s | {baseline} spread | method | "
               "method runs tok/s | method / baseline (means) | per-run ratios | "
               "mean ratio [95% t-interval] |",
               "|---|---|---|---|---|---|---|---|---|"]
    detail = ["## Runs in order", "",
              "| where | size | run | method | tok/s | median TPOT ms | vs neighbours | "
              "[low, high] | target passes/tok | draft fwd/tok |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for (kind, size), runs in sorted(collect(directory).items()):
        base_values = [r["value"] for r in runs if r["method"] == baseline]
        per_method: dict[str, list[tuple[float, float | None]]] = defaultdict(list)
        for index, run in enumerate(runs):
            ratio = low = high = None
            if run["method"] != baseline:
                around = [r["value"] for r in neighbours(runs, index, baseline)]
                if around:
                    ratio = run["value"] / statistics.mean(around)
                    low, high = run["value"] / max(around), run["value"] / min(around)
                per_method[run["method"]].append((run["value"], ratio))
            detail.append(
                f"| {kind} | {size} | {run['run']} | {run['method']} | {fmt(run['value'])} | "
                f"{fmt(run['tpot'], 1)} | {fmt(ratio, 3)} | "
                f"{'-' if low is None else f'[{low:.3f}, {high:.3f}]'} | "
                f"{fmt(run['target_passes_per_token'])} | "
                f"{fmt(run['draft_forwards_per_token'])} |")
        spread = (f"{min(base_values):.2f}-{max(base_values):.2f} "
                  f"({(max(base_values) / min(base_values) - 1) * 100:.0f}%)"
                  if base_values else "-")
        for method, values in sorted(per_method.items()):
            means = (statistics.mean(v for v, _ in values) / statistics.mean(base_values)
                     if base_values else None)
            ratios = [r for _, r in values if r is not None]
            interval = format_interval(ratio_interval(ratios) if ratios else None)
            summary.append(
                f"| {kind} | {size} | {', '.join(fmt(v) for v in base_values)} | {spread} | "
                f"{method} | {', '.join(fmt(v) for v, _ in values)} | {fmt(means, 3)} | "
                f"{', '.join(fmt(r, 3) for _, r in values)} | {interval} |")
    return "\n".join(lines + summary + [""] + detail + [""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--baseline", default="no_spec")
    args = parser.parse_args()
    (args.directory / "aba.md").write_text(report(args.directory, args.baseline))
    print(args.directory / "aba.md")


if __name__ == "__main__":
    main()
