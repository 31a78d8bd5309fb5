"""Markdown report and plot from a run_bench.py results directory.

    python benchmarks/report.py benchmarks/results/headline [--serve DIR] [--trace FILE]

Reads ``cells.jsonl`` (run_bench.py) and/or ``serve_cells.jsonl``
(serve_bench.py; from ``--serve DIR`` or the same directory) and writes, beside
them: ``report.md`` (per cell; per method mean ± std across initial lengths, the
GammaTune paper's Table 2 statistic; per category; serving), ``results.json``
(the run's context and every cell), ``throughput.png`` (tok/s per method,
error bars across initial lengths), ``throughput_vs_batch.png`` (methods as
lines over batch size) and ``draft_trace.png`` (one request's draft length and
accepted tokens per step, like the GammaTune paper's Figure 2a, from a
``VLLM_GAMMATUNE_TRACE`` file: ``--trace`` or the longest request found in
``traces/*.jsonl``).

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
from collections import defaultdict
from pathlib import Path

PROJECTED_C = (3, 10, 20)


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.open():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill
    return rows


def load(directory: Path) -> tuple[list[dict], dict]:
    rows = read_jsonl(directory / "cells.jsonl")
    context_path = directory / "context.json"
    context = json.loads(context_path.read_text()) if context_path.exists() else {}
    return rows, context


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def pm(values: list[float], digits: int = 2, suffix: str = "") -> str:
    """"mean ± std" of the values (std over initial lengths), "-" if none."""
    mean, std = mean_std(values)
    if mean is None:
        return "-"
    return f"{mean:.{digits}f}{suffix} ± {std:.{digits}f}"


def draft_forwards_per_token(row: dict) -> float | None:
    """Batched draft forwards per generated token; None where not known."""
    if row.get("draft_forward_passes_per_token"):
        return row["draft_forward_passes_per_token"]
    if row["method"] == "vllm_draft_model":
        # K forwards per propose call; at batch 1 every verified draft had a
        # call, plus each request's last (unverified) one.
        calls = (row["drafts"] + row["num_requests"]) / row["batch_size"]
        return row["k"] * calls / row["output_tokens"]
    if row["method"] == "no_spec":
        return 0.0
    return None  # e.g. vLLM's batch-size schedule or a custom config: not counted


def projected_speedup(row: dict, c: float) -> float | None:
    if row["method"] == "no_spec":
        return 1.0
    forwards = draft_forwards_per_token(row)
    if forwards is None:
        return None
    return c / (c * row["target_passes_per_token"] + forwards)


def label(row: dict) -> str:
    variant = row.get("variant") or {}
    if not variant or "method" in variant:  # a --spec config is named by its NAME
        return row["method"]
    return row["method"] + " (" + ", ".join(f"{k}={v}" for k, v in sorted(variant.items())) + ")"


def fmt(value, digits=2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def group_key(row: dict) -> tuple:
    return (row["batch_size"], row["temperature"], row.get("turns", 1))


def baselines(cells: list[dict]) -> tuple[dict | None, dict[int, dict], dict | None]:
    """(no_spec cell, vLLM fixed-K cells by k, the fastest fixed-K cell)."""
    no_spec = next((c for c in cells if c["method"] == "no_spec"), None)
    fixed = {c["k"]: c for c in cells if c["method"] == "vllm_draft_model"}
    best = max(fixed.values(), key=lambda c: c["tokens_per_second"], default=None)
    return no_spec, fixed, best


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def context_lines(context: dict) -> list[str]:
    if not context:
        return []
    args = context.get("args", {})
    return [
        f"- date: {context.get('date')}; vLLM {context.get('vllm')}; "
        f"vllm-gammatune {context.get('vllm_gammatune')}; torch {context.get('torch', '?')}; "
        f"git {context.get('git_commit', '?')}",
        f"- machine: {context.get('machine')}; CPU {context.get('cpu_model', '?')}; "
        f"VLLM_CPU_OMP_THREADS_BIND={context.get('omp_threads_bind')}",
        f"- target: `{context.get('target')}`; draft: `{context.get('draft')}`",
        f"- prompts: {args.get('dataset')} split={args.get('split')} "
        f"per_category={args.get('per_category')}, turns={args.get('turns', 1)}, chat "
        f"template; max_tokens={args.get('max_tokens')} "
        f"({'stop at EOS' if args.get('stop_at_eos') else 'ignore_eos'}); cap of adaptive "
        f"methods={args.get('cap')}",
        "",
    ]


def cell_table(cells: list[dict]) -> list[str]:
    no_spec, fixed, best = baselines(cells)
    lines = [
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
            f"{fmt(ratio(tps, no_spec and no_spec['tokens_per_second']))} | "
            f"{fmt(ratio(tps, same_k and same_k['tokens_per_second']))} | "
            f"{fmt(ratio(tps, best and best['tokens_per_second']))} | "
            f"{fmt(cell['mean_accepted_length'])} | {fmt(cell['acceptance_rate'])} | "
            f"{fmt(cell['mean_draft_length'])} | {cell['target_passes_per_token']:.2f} | "
            f"{fmt(draft_forwards_per_token(cell)) if cell['method'] != 'no_spec' else '-'} | "
            + " | ".join(fmt(projected_speedup(cell, c)) for c in PROJECTED_C) + " |"
        )
    return lines + [""]


def summary_table(cells: list[dict]) -> list[str]:
    """Per method, mean ± std across initial lengths (the paper's Table 2)."""
    no_spec, fixed, best = baselines(cells)
    by_method = defaultdict(list)
    for cell in cells:
        by_method[label(cell)].append(cell)
    lines = ["Per method, mean ± std across initial lengths (the GammaTune paper's Table 2 "
             "statistic; speedup over vLLM fixed K at the same initial length first):", "",
             "| method | vs vLLM K=k | std | n | vs best K | vs no spec | tok/s | "
             "accepted len | draft len | target passes/tok |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, group in sorted(by_method.items()):
        same = [ratio(c["tokens_per_second"], fixed[c["k"]]["tokens_per_second"])
                for c in group if c["k"] in fixed and c["method"] != "no_spec"]
        mean, std = mean_std(same)
        same_text = (f"{mean:.3f}x | {std:.3f} | {len(same)}" if mean is not None
                     else "- | - | 0")
        tps = [c["tokens_per_second"] for c in group]
        lines.append(
            f"| {name} | {same_text} | "
            f"{pm([ratio(t, best and best['tokens_per_second']) for t in tps], 3)} | "
            f"{pm([ratio(t, no_spec and no_spec['tokens_per_second']) for t in tps], 3)} | "
            f"{pm(tps)} | {pm([c['mean_accepted_length'] for c in group])} | "
            f"{pm([c['mean_draft_length'] for c in group])} | "
            f"{pm([c['target_passes_per_token'] for c in group])} |")
    return lines + [""]


def category_table(cells: list[dict]) -> list[str]:
    """Per method and category: tok/s and speedup over vLLM at the same k,
    mean ± std across initial lengths (cells run with per-batch records)."""
    cats = sorted({cat for c in cells for cat in c.get("per_category", {}) if cat != "mixed"})
    if not cats:
        return []
    _, fixed, _ = baselines(cells)

    def tps(cell, cat):
        entry = cell.get("per_category", {}).get(cat)
        return entry["output_tokens"] / entry["wall_seconds"] if entry and entry[
            "wall_seconds"] else None

    def acc(cell, cat):
        entry = cell.get("per_category", {}).get(cat)
        return 1 + entry["accepted"] / entry["drafts"] if entry and entry["drafts"] else None

    by_method = defaultdict(list)
    for cell in cells:
        by_method[label(cell)].append(cell)
    header = "| method | " + " | ".join(cats) + " |"
    rule = "|---|" + "---|" * len(cats)
    lines = ["Per category, mean ± std across initial lengths: tok/s; speedup over vLLM "
             "fixed K at the same k; mean accepted length.", ""]
    for title, value in (
            ("tok/s", lambda c, cat: tps(c, cat)),
            ("vs vLLM K=k", lambda c, cat: ratio(tps(c, cat), tps(fixed[c["k"]], cat))
             if c["k"] in fixed else None),
            ("accepted len", acc)):
        lines += [f"**{title}**", "", header, rule]
        for name, group in sorted(by_method.items()):
            lines.append(f"| {name} | " + " | ".join(
                pm([value(c, cat) for c in group]) for cat in cats) + " |")
        lines.append("")
    return lines


def build_report(rows: list[dict], context: dict,
                 serve_rows: list[dict] | None = None) -> str:
    by_group = defaultdict(list)
    for row in rows:
        by_group[group_key(row)].append(row)
    lines = ["# Benchmark report", "", *context_lines(context)]
    for (batch_size, temperature, turns), cells in sorted(by_group.items()):
        _, _, best = baselines(cells)
        turn_text = f", {turns} turns" if turns != 1 else ""
        lines += [f"## Batch {batch_size}, temperature {temperature}{turn_text}", ""]
        if best:
            lines += [f"Best vLLM fixed K of the sweep: K={best['k']} "
                      f"({best['tokens_per_second']:.2f} tok/s).", ""]
        lines += cell_table(cells) + summary_table(cells) + category_table(cells)
    if serve_rows:
        lines += serving_table(serve_rows)
    return "\n".join(lines)


def serving_table(rows: list[dict]) -> list[str]:
    """serve_bench.py cells: vLLM's client numbers plus /metrics differences."""
    lines = ["## Serving (`vllm serve`, vLLM's `bench serve` client)", "",
             "| method | k | concurrency | temp | req/s | output tok/s | vs no spec | "
             "TPOT mean / median ms | TTFT mean / median ms | accepted len | draft len | "
             "plugin us/tok | peak RSS GiB | done |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    no_spec = {(r["concurrency"], r["temperature"]): r for r in rows if r["method"] == "no_spec"}
    for r in sorted(rows, key=lambda r: (r["temperature"], r["concurrency"], label(r), r["k"])):
        base = no_spec.get((r["concurrency"], r["temperature"]))
        lines.append(
            f"| {label(r)} | {r['k'] or '-'} | {r['concurrency']} | {r['temperature']} | "
            f"{fmt(r.get('request_throughput'), 3)} | {fmt(r.get('output_throughput'))} | "
            f"{fmt(ratio(r.get('output_throughput'), base and base.get('output_throughput')))}"
            f" | {fmt(r.get('mean_tpot_ms'), 1)} / {fmt(r.get('median_tpot_ms'), 1)} | "
            f"{fmt(r.get('mean_ttft_ms'), 1)} / {fmt(r.get('median_ttft_ms'), 1)} | "
            f"{fmt(r.get('mean_accepted_length'))} | {fmt(r.get('mean_draft_length'))} | "
            f"{fmt(r.get('plugin_time_us_per_token'), 1)} | "
            f"{fmt(r.get('peak_rss_gib'))} | {r.get('completed')}/{r.get('num_requests')} |")
    return lines + [""]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(rows: list[dict], path: Path) -> None:
    plt = _pyplot()
    groups = sorted({group_key(r) for r in rows})
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4), squeeze=False)
    for ax, group in zip(axes[0], groups):
        methods = defaultdict(list)
        for r in rows:
            if group_key(r) == group:
                methods[label(r)].append(r["tokens_per_second"])
        names = sorted(methods)
        stats = [mean_std(methods[m]) for m in names]
        ax.bar(names, [m for m, _ in stats], yerr=[s for _, s in stats], capsize=4,
               color="#4c72b0")
        ax.set_title(f"batch {group[0]}, T={group[1]}: mean tok/s across initial "
                     "lengths (± std)", fontsize=9)
        ax.set_ylabel("output tokens / s")
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


#: methods whose k is the length they always draft: one line per k, not a mean
FIXED_K_METHODS = ("vllm_draft_model", "fixed_draft")


def throughput_by_batch(rows: list[dict]) -> dict[tuple, dict[str, list]]:
    """{(temperature, turns): {method: [(batch, mean tok/s, std), ...]}}: the
    adaptive methods averaged across initial lengths, fixed K one line per K."""
    values = defaultdict(list)
    for r in rows:
        name = label(r)
        if r["method"] in FIXED_K_METHODS:
            name += f" K={r['k']}"
        values[(r["temperature"], r.get("turns", 1), name, r["batch_size"])].append(
            r["tokens_per_second"])
    series: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for (temperature, turns, name, batch), tps in sorted(values.items()):
        series[(temperature, turns)][name].append((batch, *mean_std(tps)))
    return series


def plot_by_batch(rows: list[dict], path: Path) -> bool:
    series = throughput_by_batch(rows)
    if not any(len(points) > 1 for s in series.values() for points in s.values()):
        return False  # one batch size only
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(series), figsize=(6 * len(series), 4), squeeze=False)
    for ax, ((temperature, turns), methods) in zip(axes[0], sorted(series.items())):
        for name, points in sorted(methods.items()):
            ax.errorbar([p[0] for p in points], [p[1] for p in points],
                        yerr=[p[2] for p in points], marker="o", capsize=3, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({p[0] for pts in methods.values() for p in pts}))
        ax.get_xaxis().set_major_formatter(plt.ScalarFormatter())
        ax.set_xlabel("batch size")
        ax.set_ylabel("output tokens / s (mean ± std across k)")
        ax.set_title(f"temperature {temperature}" + (f", {turns} turns" if turns != 1 else ""))
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def load_trace(path: Path) -> dict[str, list[dict]]:
    """A ``VLLM_GAMMATUNE_TRACE`` file -> {req_id: steps sorted by step}
    (engine-step lines, ``"event": "plan"``, are left out)."""
    by_request = defaultdict(list)
    for row in read_jsonl(path):
        if "req_id" in row:
            by_request[row["req_id"]].append(row)
    return {req: sorted(steps, key=lambda r: r["step"]) for req, steps in by_request.items()}


def longest_trace(paths: list[Path]) -> tuple[Path, str, list[dict]] | None:
    best = None
    for path in paths:
        for req_id, steps in load_trace(path).items():
            if best is None or len(steps) > len(best[2]):
                best = (path, req_id, steps)
    return best


def plot_trace(steps: list[dict], title: str, path: Path) -> None:
    """Draft length (line) and accepted tokens (bars) per step of one request."""
    plt = _pyplot()
    x = [s["step"] for s in steps]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.bar(x, [s["num_accepted_tokens"] for s in steps], color="#55a868", alpha=0.7,
           label="accepted tokens")
    ax.step(x, [s["num_draft_tokens"] for s in steps], where="mid", color="#c44e52",
            label="draft length")
    ax.set_xlabel("verification step")
    ax.set_ylabel("tokens")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ratio_interval(ratios: list[float]) -> tuple[float, float | None, float | None]:
    """Mean of the per-run ratios and its 95% t-interval (None with one run)."""
    mean = statistics.mean(ratios)
    if len(ratios) < 2:
        return mean, None, None
    from scipy.stats import t

    half = t.ppf(0.975, len(ratios) - 1) * statistics.stdev(ratios) / len(ratios) ** 0.5
    return mean, mean - half, mean + half


def format_interval(value: tuple[float, float | None, float | None] | None) -> str:
    """``ratio_interval``'s result as ``mean [low, high]`` (``-`` for None)."""
    if value is None:
        return "-"
    mean, low, high = value
    return fmt(mean, 3) + ("" if low is None else f" [{low:.3f}, {high:.3f}]")


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--serve", type=Path, help="a serve_bench.py results directory")
    parser.add_argument("--trace", type=Path, help="a VLLM_GAMMATUNE_TRACE file")
    parser.add_argument("--req-id", help="the request to plot (default: most steps)")
    args = parser.parse_args()
    directory = args.directory
    rows, context = load(directory)
    serve_dir = args.serve or directory
    serve_rows = read_jsonl(serve_dir / "serve_cells.jsonl")
    if not context and (serve_dir / "context.json").exists():
        context = json.loads((serve_dir / "context.json").read_text())
    (directory / "report.md").write_text(build_report(rows, context, serve_rows))
    (directory / "results.json").write_text(json.dumps(
        {"context": context, "contexts": read_jsonl(directory / "contexts.jsonl"),
         "cells": rows, "serve_cells": serve_rows}, indent=1))
    try:
        if rows:
            plot(rows, directory / "throughput.png")
            plot_by_batch(rows, directory / "throughput_vs_batch.png")
        traces = [args.trace] if args.trace else sorted((directory / "traces").glob("*.jsonl"))
        if args.req_id and args.trace:
            steps = load_trace(args.trace).get(args.req_id)
            chosen = (args.trace, args.req_id, steps) if steps else None
        else:
            chosen = longest_trace(traces)
        if chosen:
            trace_file, req_id, steps = chosen
            plot_trace(steps, f"{trace_file.stem}: request {req_id}",
                       directory / "draft_trace.png")
    except ImportError:
        print("matplotlib not installed: no plots (pip install '.[bench]')")
    print(directory / "report.md")


if __name__ == "__main__":
    main()
