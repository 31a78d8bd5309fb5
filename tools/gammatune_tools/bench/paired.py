"""Interleaved paired runs: every method's engine (or server) alive, each
batch of prompts (served: each client run) on every engine back to back,
the first rotating, so the machine's drift slower than one batch cancels in
the ratio to the baseline. Here: the design's order, which rounds are
complete, the per-round summary and its table, offline and served.

A round is the whole prompt set at one batch size (served: one client run
per concurrency), every engine. Per round and method: tokens/s; the summary
gives the ratio to the baseline per round, their mean and a 95% t-interval
over rounds, beside the hardware-independent counts.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from gammatune_tools.bench.context import read_context
from gammatune_tools.bench.counters import draft_forwards, exact_counts
from gammatune_tools.bench.methods import (check_method_names, engine_environment, engine_k,
                                           method_name)
from gammatune_tools.bench.records import read_jsonl
from gammatune_tools.bench.stats import ratio_interval
from gammatune_tools.bench.tables import fmt, format_interval, percent

#: a paired run's rows (one per batch, round and method), in its output folder
ROWS_FILE = "paired.jsonl"


def baseline_first(methods: list[str], baseline: str | None) -> list[str]:
    """The summary's order: ``baseline`` (default the first engine) first.

    Engines start in ``--methods`` order. The start order may matter (two
    engines of one configuration need not run at the same speed), so a
    method can be measured started both before and after its baseline.
    """
    if baseline is None:
        return list(methods)
    if baseline not in methods:
        raise ValueError(f"--baseline {baseline!r}: not in --methods ({', '.join(methods)})")
    return [baseline] + [m for m in methods if m != baseline]


def check_engines(methods: list[str], ks: list[int], baseline: str | None,
                  known: Iterable[str]) -> None:
    """What interleaved runs need: known methods (``NAME#2`` counts as NAME),
    each engine once, one k, a baseline among them."""
    check_method_names(methods, known, name_of=method_name)
    for method in methods:
        engine_k(method, 1)
        engine_environment(method)
    if len(set(methods)) != len(methods):
        raise ValueError("--methods: each engine once (a second engine of one method: NAME#2)")
    if len(ks) != 1:
        raise ValueError(f"--k: one length (the engines are started once); got {ks}")
    baseline_first(methods, baseline)


def engine_order(methods: list[str], round_index: int, batch_index: int) -> list[str]:
    """Which engine runs a batch first: rotate by round and batch (drift cancels)."""
    shift = (round_index + batch_index) % len(methods)
    return methods[shift:] + methods[:shift]


def num_batches(num_prompts: int, size: int) -> int:
    """Batches of at most ``size`` prompts (the last one may be shorter)."""
    return -(-num_prompts // size)


def complete_rounds(rows: list[dict], methods: list[str],
                    num_prompts: int) -> dict[int, set[int]]:
    """batch size -> rounds with a row for every (batch, method)."""
    seen: dict[tuple[int, int], set[tuple[int, str]]] = defaultdict(set)
    for row in rows:
        seen[(row["batch_size"], row["round"])].add((row["batch"], row["method"]))
    done: dict[int, set[int]] = defaultdict(set)
    for (size, round_index), pairs in seen.items():
        if {(b, m) for b in range(num_batches(num_prompts, size)) for m in methods} <= pairs:
            done[size].add(round_index)
    return done


def shares_done(rows: list[dict], round_index: int, batch_sizes: list[int],
                num_prompts: int) -> set[str]:
    """The engines whose whole share of a round (every batch of every size)
    has rows: with one engine alive at a time (``--fresh-engines``) each
    engine's share of a round is its unit of resuming."""
    needed = {(size, b) for size in batch_sizes for b in range(num_batches(num_prompts, size))}
    seen: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for row in rows:
        if row["round"] == round_index:
            seen[row["method"]].add((row["batch_size"], row["batch"]))
    return {method for method, pairs in seen.items() if needed <= pairs}


def summarize(rows: list[dict], methods: list[str], num_prompts: int) -> list[dict]:
    """Per (batch size, method): tok/s, per-round ratios to the baseline, counts."""
    baseline = methods[0]
    done = complete_rounds(rows, methods, num_prompts)
    kept = [r for r in rows if r["round"] in done.get(r["batch_size"], set())]
    # (size, round, method) -> summed tokens, seconds and counters
    sums: dict[tuple, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    by_batch: dict[tuple, dict] = {}
    for row in kept:
        key = (row["batch_size"], row["round"], row["method"])
        for name in ("output_tokens", "wall_seconds", "accepted", "drafts",
                     "draft_forward_passes", "engine_steps", "target_passes",
                     "plugin_steps", "skipped_draft_steps",
                     "catch_up_tokens", "planned_draft_tokens", "stopped_draft_tokens",
                     "plugin_time_us"):
            sums[key][name] += row.get(name, 0.0) or 0.0
        by_batch[(row["batch_size"], row["round"], row["batch"], row["method"])] = row
    summary = []
    for size in sorted(done):
        rounds = sorted(done[size])
        for method in methods:
            per_round = [sums[(size, r, method)] for r in rounds]
            rate = [s["output_tokens"] / s["wall_seconds"] for s in per_round]
            base = [sums[(size, r, baseline)]["output_tokens"]
                    / sums[(size, r, baseline)]["wall_seconds"] for r in rounds]
            ratios = [m / b for m, b in zip(rate, base)]
            tokens = sum(s["output_tokens"] for s in per_round)
            steps = sum(s["plugin_steps"] for s in per_round)
            counted = {name: sum(s[name] for s in per_round)
                       for name in ("drafts", "draft_forward_passes", "engine_steps",
                                    "target_passes")}
            exact = exact_counts(tokens, counted["target_passes"], counted["drafts"],
                                 draft_forwards(method_name(method), engine_k(method, 0),
                                                counted["draft_forward_passes"],
                                                counted["engine_steps"] or None))
            planned = sum(s["planned_draft_tokens"] for s in per_round)
            same = total = 0
            by_order: dict[bool, list[float]] = {True: [], False: []}
            batch_ratios: list[float] = []
            for r in rounds:
                for b in range(num_batches(num_prompts, size)):
                    mine, theirs = by_batch[(size, r, b, method)], by_batch[(size, r, b, baseline)]
                    if mine.get("token_ids") is not None and theirs.get("token_ids") is not None:
                        total += len(mine["token_ids"])
                        same += sum(x == y for x, y in zip(mine["token_ids"], theirs["token_ids"]))
                    if method != baseline and "position" in mine:
                        ratio = theirs["wall_seconds"] / mine["wall_seconds"]
                        by_order[mine["position"] < theirs["position"]].append(ratio)
                        batch_ratios.append(ratio)
            summary.append({
                "batch_size": size, "method": method, "rounds": len(rounds),
                "tokens_per_second": rate, "ratios": ratios,
                "ratio": ratio_interval(ratios) if method != baseline else None,
                # exact counts (``counters.exact_counts``); None in rows
                # measured before target passes were counted
                **exact,
                # the plugin's own time per engine step (planning, the
                # per-token decisions, book-keeping; not the draft model)
                "plugin_us_per_step":
                    sum(s["plugin_time_us"] for s in per_round) / steps if steps else None,
                # planned draft tokens a per-token stop cut
                "stopped_share":
                    sum(s["stopped_draft_tokens"] for s in per_round) / planned
                    if planned else None,
                "drafted_step_share":
                    1 - sum(s["skipped_draft_steps"] for s in per_round) / steps
                    if steps else None,
                "catch_up_tokens": sum(s["catch_up_tokens"] for s in per_round),
                "same_as_baseline": (same, total),
                # batch-level speed ratio to the baseline when this engine ran
                # first / second in the batch (equal but for an order effect)
                "ratio_when_first": statistics.mean(by_order[True]) if by_order[True] else None,
                "ratio_when_second":
                    statistics.mean(by_order[False]) if by_order[False] else None,
                # every batch's speed ratio to the baseline's, run back to back
                "batch_ratios": batch_ratios,
            })
    return summary


#: how ``paired_report`` describes the design of a run (the default: engines alive at once)
ALIVE_AT_ONCE = ("Every engine alive at once (offline: in one process; served: one server "
                 "each); each batch of prompts (served: each client run) goes to every "
                 "engine back to back, the first engine rotating.")


#: ... and of a ``--fresh-engines`` run
FRESH_ENGINES = ("One engine alive at a time (`--fresh-engines`): in each round every "
                 "method's engine is started afresh in turn, the first rotating by round, "
                 "runs every batch of the round and is stopped.")


def paired_report(summary: list[dict], baseline: str, title: str,
                  started: list[str] | None = None, design: str = ALIVE_AT_ONCE) -> str:
    """``summarize``'s rows as a Markdown table, with the run's design."""
    lines = [f"# Interleaved paired runs against `{baseline}` ({title})", "",
             *([f"Engines started in the order {', '.join(started)}.", ""] if started else []),
             f"{design} A round is the whole prompt set at "
             "one size. Ratio: method tok/s over the baseline's in the same round; mean "
             "and 95% t-interval over rounds.", "",
             "| batch | method | rounds | tok/s per round | ratio per round | "
             "mean ratio [95% t-interval] | target passes/tok | draft fwd/tok | "
             "accepted length | drafted steps | stopped by the rule | plugin µs/step | "
             "catch-up tokens | requests equal to baseline | batch ratio when first / second |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in summary:
        same, total = row["same_as_baseline"]
        share = row["drafted_step_share"]
        lines.append(
            f"| {row['batch_size']} | {row['method']} | {row['rounds']} | "
            f"{', '.join(fmt(v) for v in row['tokens_per_second'])} | "
            f"{'-' if row['method'] == baseline else ', '.join(fmt(v, 3) for v in row['ratios'])}"
            f" | {format_interval(row['ratio'])} | {fmt(row['target_passes_per_token'])} | "
            f"{fmt(row['draft_forwards_per_token'])} | {fmt(row.get('accepted_length'))} | "
            f"{percent(share)} | "
            f"{percent(row.get('stopped_share'))} | {fmt(row.get('plugin_us_per_step'), 0)} | "
            f"{int(row['catch_up_tokens'])} | "
            f"{f'{same}/{total}' if total else '-'} | "
            f"{fmt(row['ratio_when_first'], 3)} / {fmt(row['ratio_when_second'], 3)} |")
    return "\n".join(lines + [""])


def write_summary(out: Path, methods: list[str], num_prompts: int,
                  baseline: str | None = None) -> Path:
    """``paired.md``; ``methods`` in start order, ``baseline`` default the first."""
    rows = read_jsonl(out / ROWS_FILE)
    ordered = baseline_first(methods, baseline)
    path = out / "paired.md"
    fresh = read_context(out).get("args", {}).get("fresh_engines")
    path.write_text(paired_report(summarize(rows, ordered, num_prompts), ordered[0],
                                  out.name, started=None if fresh else methods,
                                  design=FRESH_ENGINES if fresh else ALIVE_AT_ONCE))
    return path


def served_rows_as_batches(rows: list[dict]) -> list[dict]:
    """Interleaved served rows in ``summarize``'s shape: one batch per
    (round, concurrency, method), sized by the concurrency."""
    return [{"batch_size": r["concurrency"], "round": r["round"], "batch": 0,
             "method": r["method"], "position": r["position"],
             "wall_seconds": r["duration"], "output_tokens": r["total_output_tokens"],
             **served_counts(r["metrics_delta"]),
             "skipped_draft_steps": r["metrics_delta"].get("gammatune_skipped_draft_steps", 0.0),
             "plugin_steps": r["metrics_delta"].get("gammatune_steps", 0.0),
             "catch_up_tokens": r["metrics_delta"].get("gammatune_catch_up_tokens", 0.0)}
            for r in rows if "round" in r]


def served_counts(delta: dict[str, float]) -> dict[str, float]:
    """A served run's ``/metrics`` differences as the counts of a row of
    ``summarize`` (``counters.SCRAPED`` names them)."""
    return {"accepted": delta.get("accepted", 0.0), "drafts": delta.get("drafts", 0.0),
            "draft_forward_passes": delta.get("gammatune_draft_forward_passes", 0.0),
            "engine_steps": delta.get("engine_steps", 0.0),
            "target_passes": delta.get("target_passes", 0.0)}


def write_served_summary(out: Path, methods: list[str], baseline: str | None = None) -> Path:
    """``serve_paired.md``; ``methods`` in start order, ``baseline`` default the first."""
    rows = served_rows_as_batches(read_jsonl(out / "serve_cells.jsonl"))
    ordered = baseline_first(methods, baseline)
    # one "batch" per round and concurrency: 1 prompt in batches of the concurrency
    summary = summarize(rows, ordered, num_prompts=1)
    run_args = read_context(out).get("args", {})
    if run_args.get("fresh_servers"):
        started, design = None, (
            "One server alive at a time (`--fresh-servers`): in each round every "
            "method's server is started afresh in turn, the first rotating by round, runs "
            "every concurrency and is stopped"
            + ("; each measured client run follows an unmeasured one of the same "
               "prompts (`--warmup-cell`)." if run_args.get("warmup_cell") else "."))
    else:
        started, design = methods, ALIVE_AT_ONCE
    path = out / "serve_paired.md"
    path.write_text(paired_report(summary, ordered[0], out.name, started=started,
                                  design=design)
                    .replace("| batch |", "| concurrency |", 1))
    return path
