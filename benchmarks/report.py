"""Markdown report and plot from a run_bench.py results directory.

    python benchmarks/report.py benchmarks/results/issue2_quick

Writes ``report.md`` and ``throughput.png`` beside ``cells.jsonl``.

Speedups are ratios inside one run (same machine, prompts, settings). The
cost-model columns project each cell to other target/draft cost ratios
c = T_target / T_draft (GammaTune paper, eq. 6) from the measured counts, as
if a verification of several tokens cost one target pass (true on a GPU in
the memory-bound regime, not on this CPU): time per generated token in draft
forwards is c * target_passes_per_token + draft_forwards_per_token, against c
for no speculation. vLLM's fixed-K drafter runs K draft forwards per step
(estimated from its counters: exact at batch 1); the plugin's drafter counts
its forwards.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

PROJECTED_C = (3, 10, 20)


def load(directory: Path) -> tuple[list[dict], dict]:
    rows = [json.loads(line) for line in (directory / "cells.jsonl").open() if line.strip()]
    context_path = directory / "context.json"
    context = json.loads(context_path.read_text()) if context_path.exists() else {}
    return rows, context


def draft_forwards_per_token(row: dict) -> float:
    if row.get("draft_forward_passes_per_token"):
        return row["draft_forward_passes_per_token"]
    if row["method"] == "vllm_draft_model":
        # K forwards per propose call; at batch 1 every verified draft had a
        # call, plus each request's last (unverified) one.
        calls = (row["drafts"] + row["num_requests"]) / row["batch_size"]
        return row["k"] * calls / row["output_tokens"]
    return 0.0


def projected_speedup(row: dict, c: float) -> float:
    if row["method"] == "no_spec":
        return 1.0
    return c / (c * row["target_passes_per_token"] + draft_forwards_per_token(row))


def label(row: dict) -> str:
    variant = row.get("variant") or {}
    if not variant:
        return row["method"]
    return row["method"] + " (" + ", ".join(f"{k}={v}" for k, v in sorted(variant.items())) + ")"


def fmt(value, digits=2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def build_report(rows: list[dict], context: dict) -> str:
    by_batch = defaultdict(list)
    for row in rows:
        by_batch[(row["batch_size"], row["temperature"])].append(row)
    lines = ["# Benchmark report", ""]
    if context:
        args = context.get("args", {})
        lines += [
            f"- date: {context.get('date')}; vLLM {context.get('vllm')}; "
            f"vllm-gammatune {context.get('vllm_gammatune')}",
            f"- machine: {context.get('machine')}; VLLM_CPU_OMP_THREADS_BIND="
            f"{context.get('omp_threads_bind')}",
            f"- target: `{context.get('target')}`; draft: `{context.get('draft')}`",
            f"- prompts: {args.get('dataset')} split={args.get('split')} "
            f"per_category={args.get('per_category')}, first turn, chat template; "
            f"max_tokens={args.get('max_tokens')} (ignore_eos); cap of adaptive "
            f"methods={args.get('cap')}",
            "",
        ]
    for (batch_size, temperature), cells in sorted(by_batch.items()):
        no_spec = next((c for c in cells if c["method"] == "no_spec"), None)
        fixed = {c["k"]: c for c in cells if c["method"] == "vllm_draft_model"}
        best_fixed = max(fixed.values(), key=lambda c: c["tokens_per_second"], default=None)
        lines += [f"## Batch {batch_size}, temperature {temperature}", ""]
        if best_fixed:
            lines.append(f"Best vLLM fixed K of the sweep: K={best_fixed['k']} "
                         f"({best_fixed['tokens_per_second']:.2f} tok/s).")
            lines.append("")
        lines += [
            "| method | k | tok/s | vs no spec | vs vLLM K=k | vs best K | accepted len | "
            "accept rate | draft len | target passes/tok | draft fwd/tok | "
            + " | ".join(f"proj. c={c}" for c in PROJECTED_C) + " |",
            "|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(PROJECTED_C),
        ]
        for cell in sorted(cells, key=lambda c: (label(c), c["k"])):
            tps = cell["tokens_per_second"]
            same_k = fixed.get(cell["k"])
            lines.append(
                f"| {label(cell)} | {cell['k'] or '-'} | {tps:.2f} | "
                f"{fmt(tps / no_spec['tokens_per_second']) if no_spec else '-'} | "
                f"{fmt(tps / same_k['tokens_per_second']) if same_k else '-'} | "
                f"{fmt(tps / best_fixed['tokens_per_second']) if best_fixed else '-'} | "
                f"{fmt(cell['mean_accepted_length'])} | {fmt(cell['acceptance_rate'])} | "
                f"{fmt(cell['mean_draft_length'])} | {cell['target_passes_per_token']:.2f} | "
                f"{fmt(draft_forwards_per_token(cell)) if cell['method'] != 'no_spec' else '-'} | "
                + " | ".join(fmt(projected_speedup(cell, c)) for c in PROJECTED_C) + " |"
            )
        lines.append("")
        summary = defaultdict(list)
        for cell in cells:
            same_k = fixed.get(cell["k"])
            if same_k and cell["method"] != "no_spec":
                summary[label(cell)].append(
                    cell["tokens_per_second"] / same_k["tokens_per_second"])
        if summary:
            lines += ["Speedup over vLLM fixed K at the same initial length, mean ± std "
                      "across initial lengths (the GammaTune paper's Table 2 statistic):", "",
                      "| method | mean | std | n |", "|---|---|---|---|"]
            for method, values in sorted(summary.items()):
                std = statistics.stdev(values) if len(values) > 1 else 0.0
                lines.append(f"| {method} | {statistics.mean(values):.3f}x | {std:.3f} | "
                             f"{len(values)} |")
            lines.append("")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = sorted({r["batch_size"] for r in rows})
    fig, axes = plt.subplots(1, len(batches), figsize=(6 * len(batches), 4), squeeze=False)
    for ax, batch_size in zip(axes[0], batches):
        methods = defaultdict(list)
        for r in rows:
            if r["batch_size"] == batch_size:
                methods[label(r)].append(r["tokens_per_second"])
        names = sorted(methods)
        means = [statistics.mean(methods[m]) for m in names]
        stds = [statistics.stdev(methods[m]) if len(methods[m]) > 1 else 0 for m in names]
        ax.bar(names, means, yerr=stds, capsize=4, color="#4c72b0")
        ax.set_title(f"batch {batch_size}: mean tok/s across initial lengths (± std)")
        ax.set_ylabel("output tokens / s")
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    directory = Path(sys.argv[1])
    rows, context = load(directory)
    (directory / "report.md").write_text(build_report(rows, context))
    try:
        plot(rows, directory / "throughput.png")
    except ImportError:
        print("matplotlib not installed: no plot (pip install '.[bench]')")
    print(directory / "report.md")


if __name__ == "__main__":
    main()
