"""Pooling paired runs: the rounds of several interleaved runs of one
baseline (e.g. both engine start orders, offline or served) as one set of
paired observations."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

from gammatune_tools.bench.methods import method_name
from gammatune_tools.bench.paired import (ROWS_FILE, baseline_first, served_rows_as_batches,
                                          summarize)
from gammatune_tools.bench.prompts import load_prompts
from gammatune_tools.bench.records import read_jsonl
from gammatune_tools.bench.stats import ratio_interval
from gammatune_tools.bench.tables import format_interval


def pool(runs: list[tuple[str, str, list[dict]]]) -> list[dict]:
    """Per (batch size, method): the per-round ratios of several runs, pooled.

    ``runs``: (name, baseline, ``summarize`` output) per run, e.g. the same
    pair started in both orders. Each round is one paired observation, so the
    rounds of all runs pool into one mean and t-interval; beside it the same
    without each run's first round (its lowest-numbered complete round: the
    engines' first use of the batch shapes and, for learning methods, the
    round that learns).
    """
    baselines = {baseline for _, baseline, _ in runs}
    if len(baselines) != 1:
        raise ValueError("--pool: the runs have different baselines "
                         f"({', '.join(sorted(baselines))}); pool runs of one baseline")
    (baseline,) = baselines
    grouped: dict[tuple[int, str], list[tuple[str, list[float]]]] = defaultdict(list)
    batches: dict[tuple[int, str], list[float]] = defaultdict(list)
    for name, _, summary in runs:
        for row in summary:
            if row["method"] != baseline and row["ratios"]:
                key = (row["batch_size"], method_name(row["method"]))
                grouped[key].append((name, row["ratios"]))
                batches[key] += row.get("batch_ratios", [])
    pooled = []
    for (size, method), per_run in sorted(grouped.items()):
        ratios = [r for _, rs in per_run for r in rs]
        later = [r for _, rs in per_run for r in rs[1:]]
        pooled.append({
            "batch_size": size, "method": method, "baseline": baseline,
            "runs": [(name, len(rs), statistics.mean(rs)) for name, rs in per_run],
            "rounds": len(ratios), "ratio": ratio_interval(ratios),
            "rounds_after_first": len(later),
            "ratio_after_first": ratio_interval(later) if later else None,
            # each batch run back to back on both engines as one observation:
            # more of them than rounds, but batches of one run share its
            # engines' start order, so pool runs of both orders
            "batches": len(batches[(size, method)]),
            "batch_ratio": (ratio_interval(batches[(size, method)])
                            if len(batches[(size, method)]) > 1 else None)})
    return pooled


def pool_report(pooled: list[dict]) -> str:
    baseline = pooled[0]["baseline"] if pooled else "-"
    lines = [f"# Paired runs pooled, against `{baseline}`", "",
             "Every round of every run is one paired observation (method tok/s over "
             "the baseline's in the same round); mean and 95% t-interval over all "
             "of them, and without each run's first round; and every batch of prompts "
             "(run back to back on both engines) as one observation.", "",
             "| batch (served: concurrency) | method | runs (rounds, mean ratio) | rounds | pooled ratio "
             "[95% t-interval] | rounds after the first | pooled without first rounds | "
             "batches | per batch [95% t-interval] |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in pooled:
        runs = "; ".join(f"{name} ({n}, {mean:.3f})" for name, n, mean in row["runs"])
        lines.append(f"| {row['batch_size']} | {row['method']} | {runs} | {row['rounds']} | "
                     f"{format_interval(row['ratio'])} | {row['rounds_after_first']} | "
                     f"{format_interval(row['ratio_after_first'])} | "
                     f"{row.get('batches', 0)} | {format_interval(row.get('batch_ratio'))} |")
    return "\n".join(lines + [""])


def is_served_run(directory: Path) -> bool:
    return (not (directory / ROWS_FILE).exists()
            and (directory / "serve_cells.jsonl").exists())


def pool_directories(directories: list[Path]) -> tuple[list[dict], bool]:
    """``pool`` of the runs in ``directories``, and whether they are served runs
    (all of them or none: a concurrency is not a batch size)."""
    served = {is_served_run(d) for d in directories}
    if len(served) > 1:
        raise ValueError("--pool: pool offline (paired.py) and served (serve_bench.py) "
                         "runs separately")
    return pool([read_run(d) for d in directories]), served == {True}


def read_run(directory: Path) -> tuple[str, str, list[dict]]:
    """A finished (or partial) ``benchmarks.run_paired`` run from its ``context.json``
    and rows, or a ``benchmarks.serve_bench --rounds`` run (its ``serve_cells.jsonl``: one
    observation per round and concurrency, the concurrency in the batch
    column)."""
    args = json.loads((directory / "context.json").read_text())["args"]
    methods = args["methods"].split(",")
    ordered = baseline_first(methods, args.get("baseline"))
    if is_served_run(directory):
        rows = served_rows_as_batches(read_jsonl(directory / "serve_cells.jsonl"))
        return directory.name, ordered[0], summarize(rows, ordered, num_prompts=1)
    num_prompts = len(load_prompts(args["dataset"], args["per_category"], args["split"],
                                   args["limit"]))  # the run's prompt set
    rows = read_jsonl(directory / ROWS_FILE)
    return directory.name, ordered[0], summarize(rows, ordered, num_prompts)
