"""Interleaved paired benchmark: every method's engine alive at once, batches alternating.

    python benchmarks/paired.py --out benchmarks/runs/paired \\
        --methods no_spec,gammatune_cost --k 8 --batch-sizes 4,16 --rounds 6 \\
        --max-tokens 64 --split eval --per-category 2
    python benchmarks/paired.py --out DIR --summary-only

Why: on this CPU the machine's speed drifts by 10-15% over minutes (fresh
engines of one configuration differ that much, and two runs minutes apart
too), so engine-per-run A-B-A series (``diagnostics/aba.py``) need many rounds to say
whether a method is within a few percent of its baseline. Here one process
starts one engine per method (each its own vLLM engine-core process, as
``LLM`` does) and, for each batch of prompts, runs that batch on every
engine back to back, rotating which engine goes first. Drift slower than
one batch (10-40 s at batch 4-16 on the real pair) cancels in the ratio;
faster noise does not (back-to-back batches at batch 4 differ by several
percent on a small CPU) and only averages out over rounds.

A round is the whole prompt set at one batch size, every engine. Per round
and method: tokens/s (its batches' tokens over their wall time); the summary
gives the ratio to the baseline (first method) per round, their mean and a
95% t-interval over rounds, beside the hardware-independent counts (target
passes and draft forwards per generated token, share of engine steps that
drafted) and, at temperature 0, the share of requests whose tokens equal
the baseline's (lossless methods: all of them, up to batch-dependent
floating-point ties).

An A/A run (``--methods no_spec,no_spec#2``: two engines of one method)
measures what the design itself leaves: differences between engine
instances, which interleaving does not cancel.

An engine switch might cost the engine that runs next (caches, threads
waking up). As a precaution each engine generates ``--switch-warmup-tokens``
(default 4) tokens for a short prompt outside the set (so no measured prompt
is in its prefix cache), untimed, before its first timed batch after a
switch; and the report gives each method's mean batch ratio when it ran
first and when it ran second, which differ only by an order effect.

Only one engine generates at a time; an idle engine's core process waits on
its input queue. Each engine holds its weights and ``VLLM_CPU_KVCACHE_SPACE``
GiB (default here 2) of KV cache. Rows go to ``paired.jsonl`` (resumable:
complete rounds are kept, a round cut short runs again) and the summary to
``paired.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import (add_common_args, append_row, load_prompts, parse_ks,  # noqa: E402
                          run_context, trace_path, write_context)
from report import fmt, format_interval, ratio_interval, read_jsonl  # noqa: E402


class EngineCounts:
    """One engine's counts, read beside the Prometheus registry.

    With several engines in one process the registry reports only the newest
    (vLLM unregisters the previous engine's metrics, and the plugin follows
    it), so ``evaluation.read_counters`` cannot tell them apart. Here vLLM's
    spec-decoding stats are summed from the engine's own stat-logger calls and
    the plugin's counters are read from the engine's own counter file.
    """

    def __init__(self, llm):
        from vllm_gammatune.methods.settings import ADDITIONAL_CONFIG_KEY
        from vllm_gammatune.telemetry.metrics import StepCounters

        self.spec = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
        manager = llm.llm_engine.logger_manager
        original = manager.record

        def record(scheduler_stats, *args, **kwargs):
            stats = getattr(scheduler_stats, "spec_decoding_stats", None)
            if stats is not None:
                self.spec["drafts"] += stats.num_drafts
                self.spec["draft_tokens"] += stats.num_draft_tokens
                self.spec["accepted"] += stats.num_accepted_tokens
            return original(scheduler_stats, *args, **kwargs)

        manager.record = record
        plugin = (llm.llm_engine.vllm_config.additional_config or {}).get(ADDITIONAL_CONFIG_KEY)
        self.plugin = None if plugin is None else StepCounters.attach(
            plugin["metrics_path"], plugin["settings"]["num_speculative_tokens"])

    def read(self) -> dict[str, float]:
        values = dict(self.spec)
        snap = self.plugin.snapshot() if self.plugin is not None else {}
        for key, field in (("draft_forward_passes", "num_draft_forward_passes"),
                           ("skipped_draft_steps", "num_skipped_draft_steps"),
                           ("catch_up_tokens", "num_catch_up_tokens"),
                           ("plugin_steps", "num_steps"),
                           ("planned_draft_tokens", "num_planned_draft_tokens"),
                           ("stopped_draft_tokens", "num_stopped_draft_tokens"),
                           ("plugin_time_us", "plugin_micros")):
            values[key] = snap.get(field, 0)
        return values


#: the untimed request after an engine switch (not in any benchmark set)
SWITCH_WARMUP_PROMPT = [[{"role": "user", "content": "Count from one to ten."}]]


def method_name(engine: str) -> str:
    """``--methods`` entry -> method: ``no_spec#2`` is a second ``no_spec``
    engine (A/A runs); ``vllm_draft_model@3`` is that method at K = 3."""
    return engine.partition("#")[0].partition("@")[0]


def engine_k(engine: str, default: int) -> int:
    """The draft length of an entry: its ``@K``, else ``--k``'s."""
    k = engine.partition("#")[0].partition("@")[2]
    if not k:
        return default
    if not k.isdigit() or int(k) < 1:
        raise ValueError(f"--methods: {engine!r}: the length after '@' must be an "
                         "integer >= 1")
    return int(k)


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
    from gammatune_tools.evaluation import check_method_names

    check_method_names(methods, known, name_of=method_name)
    for method in methods:
        engine_k(method, 1)
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


def draft_forwards(engine: str, per_round: list[dict]) -> float | None:
    """Batched draft forwards: the plugin's counter; vLLM's own drafter
    (no counter) runs K of them at every step that drafts (None where its K
    is not in the engine's name)."""
    counted = sum(s["draft_forward_passes"] for s in per_round)
    if counted or method_name(engine) != "vllm_draft_model":
        return counted
    k = engine_k(engine, 0)
    return k * sum(s["drafts"] for s in per_round) if k else None


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
                     "draft_forward_passes", "plugin_steps", "skipped_draft_steps",
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
            drafts = sum(s["drafts"] for s in per_round)
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
                "target_passes_per_token":
                    (tokens - sum(s["accepted"] for s in per_round)) / tokens,
                "draft_forwards_per_token":
                    None if (forwards := draft_forwards(method, per_round)) is None
                    else forwards / tokens,
                # 1 + accepted per verification that had drafts (vLLM's
                # mean acceptance length)
                "accepted_length":
                    1 + sum(s["accepted"] for s in per_round) / drafts if drafts else None,
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


#: how ``report`` describes the design of a run (the default: engines alive at once)
ALIVE_AT_ONCE = ("Every engine alive at once (offline: in one process; served: one server "
                 "each); each batch of prompts (served: each client run) goes to every "
                 "engine back to back, the first engine rotating.")


def report(summary: list[dict], baseline: str, title: str,
           started: list[str] | None = None, design: str = ALIVE_AT_ONCE) -> str:
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


def percent(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def write_summary(out: Path, methods: list[str], num_prompts: int,
                  baseline: str | None = None) -> Path:
    """``paired.md``; ``methods`` in start order, ``baseline`` default the first."""
    rows = read_jsonl(out / "paired.jsonl") if (out / "paired.jsonl").exists() else []
    ordered = baseline_first(methods, baseline)
    path = out / "paired.md"
    path.write_text(report(summarize(rows, ordered, num_prompts), ordered[0], out.name,
                           started=methods))
    return path


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
    return (not (directory / "paired.jsonl").exists()
            and (directory / "serve_cells.jsonl").exists())


def pool_directories(directories: list[Path]) -> tuple[list[dict], bool]:
    """``pool`` of the runs in ``directories``, and whether they are served runs
    (all of them or none: a concurrency is not a batch size)."""
    served = {is_served_run(d) for d in directories}
    if len(served) > 1:
        raise ValueError("--pool: pool offline (paired.py) and served (serve_bench.py) "
                         "runs separately")
    return pool([read_run(d) for d in directories]), served == {True}


def plot_pool(pooled: list[dict], path: Path, served: bool) -> None:
    """Each method's pooled ratio against the batch size (or concurrency),
    with its 95% interval, over all rounds and without first rounds."""
    from report import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    methods = sorted({row["method"] for row in pooled})
    for offset, method in enumerate(methods):
        rows = sorted((r for r in pooled if r["method"] == method),
                      key=lambda r: r["batch_size"])
        for key, style, suffix in (("ratio", "o-", "all rounds"),
                                   ("ratio_after_first", "s--", "without first rounds")):
            points = [(r["batch_size"], r[key]) for r in rows if r[key] is not None]
            if not points:
                continue
            shift = 1.0 + 0.04 * (2 * offset + (key != "ratio"))  # keep bars apart
            xs = [size * shift for size, _ in points]
            means = [interval[0] for _, interval in points]
            errors = [[m - interval[1] for m, (_, interval) in zip(means, points)],
                      [interval[2] - m for m, (_, interval) in zip(means, points)]]
            ax.errorbar(xs, means, yerr=errors, fmt=style, capsize=3,
                        label=f"{method}, {suffix}")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r["batch_size"] for r in pooled}))
    ax.get_xaxis().set_major_formatter(plt.ScalarFormatter())
    ax.set_xlabel("concurrency (served)" if served else "batch size (offline)")
    ax.set_ylabel(f"tok/s over {pooled[0]['baseline']}'s, same round (95% CI)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def read_run(directory: Path) -> tuple[str, str, list[dict]]:
    """A finished (or partial) ``paired.py`` run from its ``context.json`` and
    rows, or a ``serve_bench.py --rounds`` run (its ``serve_cells.jsonl``: one
    observation per round and concurrency, the concurrency in the batch
    column)."""
    args = json.loads((directory / "context.json").read_text())["args"]
    methods = args["methods"].split(",")
    ordered = baseline_first(methods, args.get("baseline"))
    if is_served_run(directory):
        from serve_bench import served_rows_as_batches

        rows = served_rows_as_batches(read_jsonl(directory / "serve_cells.jsonl"))
        return directory.name, ordered[0], summarize(rows, ordered, num_prompts=1)
    num_prompts = len(load_prompts(args["dataset"], args["per_category"], args["split"],
                                   args["limit"]))  # the run's prompt set
    rows = read_jsonl(directory / "paired.jsonl")
    return directory.name, ordered[0], summarize(rows, ordered, num_prompts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, methods_default="no_spec,gammatune_cost", k_default="8")
    parser.add_argument("--batch-sizes", default="4,16")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--switch-warmup-tokens", type=int, default=4,
                        help="after switching engines, generate this many tokens for a "
                             "short prompt outside the set, untimed (0: off)")
    parser.add_argument("--baseline", help="the method the others are compared with "
                        "(default: the first of --methods, which also starts first)")
    parser.add_argument("--summary-only", action="store_true")
    parser.add_argument("--pool", metavar="DIR,DIR",
                        help="pool the per-round ratios of these runs (e.g. both start "
                             "orders) into <out>/pooled.md and pooled.json; nothing runs")
    parser.add_argument("--plot", action="store_true",
                        help="with --pool: also <out>/pooled.png (needs matplotlib)")
    args = parser.parse_args()

    if args.pool:
        try:
            pooled, served = pool_directories([Path(d) for d in args.pool.split(",")])
        except (ValueError, FileNotFoundError) as error:
            sys.exit(str(error))
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "pooled.md").write_text(pool_report(pooled))
        (out / "pooled.json").write_text(json.dumps(pooled, indent=1))
        print(out / "pooled.md")
        if args.plot and pooled:
            try:
                plot_pool(pooled, out / "pooled.png", served=served)
            except ImportError:
                sys.exit("--plot needs matplotlib: pip install '.[bench]'")
            print(out / "pooled.png")
        return

    from gammatune_tools.evaluation import METHODS  # no vLLM import

    methods = args.methods.split(",")
    ks = parse_ks(args.k)
    try:
        check_engines(methods, ks, args.baseline, METHODS)
    except ValueError as error:
        sys.exit(str(error))
    if args.spec:
        sys.exit("--spec: not supported here; use run_bench.py")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prompts = load_prompts(args.dataset, args.per_category, args.split, args.limit)
    conversations = [[{"role": "user", "content": turns[0]}] for _, turns in prompts]
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    temperature = float(args.temperature)
    if args.summary_only:
        print(write_summary(out, methods, len(conversations), args.baseline))
        return

    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from vllm import SamplingParams

    from gammatune_tools.evaluation import _generate, start_llm, stop_llm
    from gammatune_tools.model_prep import prepare_pair

    target, draft = prepare_pair(target_path=args.target, draft_path=args.draft)
    write_context(out, run_context(args, target, draft))
    results = out / "paired.jsonl"
    params = SamplingParams(temperature=temperature, max_tokens=args.max_tokens,
                            ignore_eos=True, seed=0)
    warmup_params = SamplingParams(temperature=temperature,
                                   max_tokens=args.switch_warmup_tokens, ignore_eos=True, seed=0)
    engines, counts, last_engine = {}, {}, None
    try:
        for method in methods:
            spec = METHODS[method_name(method)](draft, engine_k(method, ks[0]), args.cap)
            if args.trace:  # the engine's processes read it when they start
                os.environ["VLLM_GAMMATUNE_TRACE"] = str(trace_path(out, method))
            engines[method] = start_llm(target, spec, max_model_len=args.max_model_len,
                                        dtype=args.dtype, max_num_seqs=max(batch_sizes))
            counts[method] = EngineCounts(engines[method])
            _generate(engines[method], conversations[:1], params)  # warm-up, not timed
        for size in batch_sizes:
            batches = [conversations[i:i + size] for i in range(0, len(conversations), size)]
            rows = read_jsonl(results) if results.exists() else []
            done = complete_rounds(rows, methods, len(conversations)).get(size, set())
            for round_index in range(args.rounds):
                if round_index in done:
                    continue
                for batch_index, batch in enumerate(batches):
                    for position, method in enumerate(
                            engine_order(methods, round_index, batch_index)):
                        llm = engines[method]
                        if method != last_engine and args.switch_warmup_tokens:
                            _generate(llm, SWITCH_WARMUP_PROMPT, warmup_params)  # untimed
                        last_engine = method
                        before = counts[method].read()
                        started = time.perf_counter()
                        outputs = _generate(llm, batch, params)
                        seconds = time.perf_counter() - started
                        after = counts[method].read()
                        append_row(results, {
                            "batch_size": size, "round": round_index, "batch": batch_index,
                            "method": method, "position": position, "time": time.time(),
                            "wall_seconds": seconds,
                            "output_tokens": sum(len(o.outputs[0].token_ids) for o in outputs),
                            "token_ids": [list(o.outputs[0].token_ids) for o in outputs],
                            **{k: after[k] - before[k] for k in after}})
                print(f"b={size} round {round_index + 1}/{args.rounds} done "
                      f"({time.strftime('%H:%M:%S')})", file=sys.stderr, flush=True)
                write_summary(out, methods, len(conversations), args.baseline)
    finally:
        for llm in engines.values():
            stop_llm(llm)
    print(write_summary(out, methods, len(conversations), args.baseline))


if __name__ == "__main__":
    main()
