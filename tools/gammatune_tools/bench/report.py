"""The tables of a run_bench (offline) and serve_bench (served) results folder.

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

from collections import defaultdict

from gammatune_tools.bench.counters import exact_counts
from gammatune_tools.bench.stats import mean_std, ratio
from gammatune_tools.bench.tables import fmt, label, pm

#: the target/draft cost ratios c the tables project each cell to
PROJECTED_C = (3, 10, 20)


def projected_speedup(row: dict, c: float) -> float | None:
    if row["method"] == "no_spec":
        return 1.0
    forwards, passes = row.get("draft_forwards_per_token"), row.get("target_passes_per_token")
    if forwards is None or passes is None:
        return None  # not counted (e.g. vLLM's batch-size schedule, a custom config)
    return c / (c * passes + forwards)


def group_key(row: dict) -> tuple:
    return (row["batch_size"], row["temperature"], row.get("turns", 1))


def baselines(cells: list[dict]) -> tuple[dict | None, dict[int, dict], dict | None]:
    """(no_spec cell, vLLM fixed-K cells by k, the fastest fixed-K cell)."""
    no_spec = next((c for c in cells if c["method"] == "no_spec"), None)
    fixed = {c["k"]: c for c in cells if c["method"] == "vllm_draft_model"}
    best = max(fixed.values(), key=lambda c: c["tokens_per_second"], default=None)
    return no_spec, fixed, best


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
            f"{fmt(cell['mean_draft_length'])} | {fmt(cell['target_passes_per_token'])} | "
            f"{fmt(cell.get('draft_forwards_per_token')) if cell['method'] != 'no_spec' else '-'} | "
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
        if not entry:
            return None
        return exact_counts(entry["output_tokens"], entry.get("target_passes"),
                            entry["drafts"], None)["accepted_length"]

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
    """serve_bench cells: vLLM's client numbers plus /metrics differences."""
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
