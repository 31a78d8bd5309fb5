"""The summary of a served traffic run (``benchmarks.run_traffic``): per choice
(a server configuration), per phase and over the whole trace, the client's
numbers, the counts, the plugin's decisions, and interleaved ratios with
95% t-intervals over rounds; as JSON and Markdown.

A round sends the whole trace to every choice, each on a fresh server. Only
complete rounds count (every choice ran every phase). A trace's time is the
sum of its phases' client durations (the idle seconds between phases, in
which the harness reads counters, are left out). Ratios are speed-ups: A
over B in a round is B's seconds over A's, so above 1 is faster.

Static choices are those whose rule is fixed before the run: no
speculation and vLLM's ``draft_model`` (a fixed K, or its batch-size table
of fixed rows). The best static choice is the one with the least time over
the complete rounds, over the whole trace and in each phase.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from gammatune_tools.bench.context import read_context, read_contexts
from gammatune_tools.bench.counters import exact_counts
from gammatune_tools.bench.records import read_jsonl
from gammatune_tools.bench.stats import ratio_interval
from gammatune_tools.bench.tables import fmt, format_interval, percent
from gammatune_tools.bench.traffic_decisions import decision_shares, plan_series

WHOLE = "whole"

#: /metrics differences summed for the counts of a choice
COUNT_KEYS = ("accepted", "drafts", "draft_tokens", "gammatune_steps",
              "gammatune_skipped_draft_steps", "gammatune_catch_up_tokens", "target_passes")

#: what the subject is built to reach, checked on every run: over the whole
#: trace at least this speed-up over the best static choice (and an interval
#: above 1), in each phase at least ``PHASE_FLOOR`` of the best static choice
#: of the phase, TTFT p99 at most ``TTFT_CEILING`` times the baseline's
WHOLE_TARGET, PHASE_FLOOR, TTFT_CEILING = 1.05, 0.97, 1.10


def is_static(spec: dict | None) -> bool:
    """No speculation, or vLLM's own drafter (fixed K or batch-size table)."""
    return spec is None or spec.get("method") == "draft_model"


def complete_traces(rows: list[dict], num_phases: int) -> dict[tuple[str, int], list[dict]]:
    """(choice, round) -> its phase rows in order, for traces with every phase."""
    traces: dict[tuple[str, int], dict[int, dict]] = defaultdict(dict)
    for row in rows:
        traces[(row["choice"], row["round"])][row["phase_index"]] = row
    return {key: [phases[i] for i in range(num_phases)] for key, phases in traces.items()
            if set(phases) == set(range(num_phases))}


def complete_rounds(traces: dict, choices: list[str]) -> list[int]:
    rounds = {r for _, r in traces}
    return sorted(r for r in rounds if all((c, r) in traces for c in choices))


def in_scope(trace: list[dict], scope: str) -> list[dict]:
    return trace if scope == WHOLE else [row for row in trace if row["phase"] == scope]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    import numpy

    return float(numpy.percentile(values, q))


def client_stats(rows: list[dict]) -> dict:
    """Phase rows pooled (several phases, several rounds): tokens, seconds,
    TTFT and TPOT percentiles over their requests, the counts."""
    seconds = sum(row["duration"] for row in rows)
    tokens = sum(row["total_output_tokens"] or 0 for row in rows)
    ttft = [v for row in rows for v in row["ttft_ms"]]
    tpot = [v for row in rows for v in row["tpot_ms"]]
    counts = {key: sum(row["metrics_delta"].get(key, 0.0) for row in rows) for key in COUNT_KEYS}
    steps = counts["gammatune_steps"]
    exact = exact_counts(tokens, counts["target_passes"], counts["drafts"], None)
    return {
        "seconds": seconds, "output_tokens": tokens,
        "completed": sum(row["completed"] or 0 for row in rows),
        "failed": sum(row["failed"] or 0 for row in rows),
        "output_throughput": tokens / seconds if seconds else None,
        "ttft_p50_ms": percentile(ttft, 50), "ttft_p99_ms": percentile(ttft, 99),
        "tpot_p50_ms": percentile(tpot, 50), "tpot_p99_ms": percentile(tpot, 99),
        **{key: exact[key] for key in ("target_passes_per_token", "accepted_length")},
        "mean_draft_length":
            counts["draft_tokens"] / counts["drafts"] if counts["drafts"] else None,
        "drafted_step_share":
            1 - counts["gammatune_skipped_draft_steps"] / steps if steps else None,
        "catch_up_tokens": counts["gammatune_catch_up_tokens"] if steps else None,
    }


def summed_decisions(rows: list[dict]) -> dict | None:
    """The rows' trace counts added up, with their shares (None untraced)."""
    traced = [row["decisions"] for row in rows if row.get("decisions")]
    if not traced:
        return None
    counts = {key: sum(d[key] for d in traced) for key in traced[0] if key != "steps_to_change"}
    return {**counts, **decision_shares(counts),
            "steps_to_change": [d["steps_to_change"] for d in traced]}


def summarize_traffic(rows: list[dict], choices: list[str], phase_names: list[str],
                      baseline: str, subject: str | None) -> dict:
    """Per choice and scope (``WHOLE`` and each phase): the pooled client
    numbers, seconds per complete round, the speed-up over ``baseline`` per
    round with its interval, the decisions; the best static choice per
    scope, the subject over every static choice, and the targets."""
    traces = complete_traces(rows, len(phase_names))
    rounds = complete_rounds(traces, choices)
    specs = {row["choice"]: row.get("speculative_config") for row in rows}
    static = [c for c in choices if c in specs and is_static(specs[c])]
    scopes = [WHOLE, *phase_names]

    def seconds(choice: str, round_index: int, scope: str) -> float:
        return sum(row["duration"] for row in in_scope(traces[(choice, round_index)], scope))

    def speedups(faster: str, slower: str, scope: str) -> list[float]:
        return [seconds(slower, r, scope) / seconds(faster, r, scope) for r in rounds]

    stats: dict[str, dict[str, dict]] = {}
    for choice in choices:
        stats[choice] = {}
        for scope in scopes:
            picked = [row for r in rounds for row in in_scope(traces[(choice, r)], scope)]
            per_round = speedups(choice, baseline, scope)
            stats[choice][scope] = {
                **client_stats(picked),
                "seconds_per_round": [seconds(choice, r, scope) for r in rounds],
                "over_baseline_per_round": per_round,
                "over_baseline": ratio_interval(per_round)
                if per_round and choice != baseline else None,
                "decisions": summed_decisions(picked),
            }
    best_static = {scope: min(static, key=lambda c: stats[c][scope]["seconds"])
                   for scope in scopes} if static and rounds else {}
    against_static = ({s: {scope: ratio_interval(speedups(subject, s, scope)) for scope in scopes}
                       for s in static}
                      if subject in choices and subject not in static and rounds else {})
    return {"rounds": rounds, "choices": choices, "phases": phase_names, "baseline": baseline,
            "subject": subject, "static": static, "best_static": best_static,
            "against_static": against_static, "stats": stats,
            "targets": targets(stats, against_static, best_static, baseline, subject,
                               phase_names)}


def targets(stats: dict, against_static: dict, best_static: dict, baseline: str,
            subject: str | None, phase_names: list[str]) -> list[dict]:
    """The subject's targets, each {"target", "value", "met"} (none without
    a subject, a static choice or a complete round)."""
    if not against_static or subject not in stats:
        return []
    whole = against_static[best_static[WHOLE]][WHOLE]
    found = [{"target": f"whole trace: >= {WHOLE_TARGET:.2f}x the best static choice "
                        f"({best_static[WHOLE]}), interval above 1.0",
              "value": format_interval(whole),
              "met": bool(whole[0] >= WHOLE_TARGET and (whole[1] is None or whole[1] >= 1.0))}]
    for phase in phase_names:
        best = best_static[phase]
        ratio = against_static[best][phase][0]
        found.append({"target": f"{phase}: >= {PHASE_FLOOR:.2f}x its best static choice "
                                f"({best})", "value": fmt(ratio, 3),
                      "met": bool(ratio >= PHASE_FLOOR)})
    mine, theirs = stats[subject][WHOLE]["ttft_p99_ms"], stats[baseline][WHOLE]["ttft_p99_ms"]
    if mine is not None and theirs:
        found.append({"target": f"TTFT p99 at most {TTFT_CEILING:.2f}x {baseline}'s",
                      "value": f"{mine:.0f} ms against {theirs:.0f} ms "
                               f"({mine / theirs:.2f}x)",
                      "met": bool(mine <= TTFT_CEILING * theirs)})
    return found


def _ms_pair(entry: dict, name: str) -> str:
    return f"{fmt(entry[f'{name}_p50_ms'], 0)} / {fmt(entry[f'{name}_p99_ms'], 0)}"


def scope_table(summary: dict, scope: str) -> list[str]:
    """One scope's table: a row per choice."""
    baseline = summary["baseline"]
    lines = [f"| choice | seconds per round | tok/s | x {baseline} per round | "
             f"x {baseline} [95% CI] | TTFT p50 / p99 ms | TPOT p50 / p99 ms | "
             "target passes/tok | accepted length | draft length | drafted steps | "
             "catch-up tokens | requests |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for choice in summary["choices"]:
        entry = summary["stats"][choice][scope]
        catch_up = entry["catch_up_tokens"]
        lines.append(
            f"| {choice} | {', '.join(fmt(v, 1) for v in entry['seconds_per_round'])} | "
            f"{fmt(entry['output_throughput'])} | "
            f"{'-' if choice == baseline else ', '.join(fmt(v, 3) for v in entry['over_baseline_per_round'])} | "
            f"{format_interval(entry['over_baseline'])} | {_ms_pair(entry, 'ttft')} | "
            f"{_ms_pair(entry, 'tpot')} | {fmt(entry['target_passes_per_token'])} | "
            f"{fmt(entry['accepted_length'])} | {fmt(entry['mean_draft_length'])} | "
            f"{percent(entry['drafted_step_share'])} | "
            f"{'-' if catch_up is None else int(catch_up)} | {entry['completed']}"
            + (f" ({entry['failed']} failed) |" if entry["failed"] else " |"))
    return lines


def against_static_table(summary: dict) -> list[str]:
    scopes = [WHOLE, *summary["phases"]]
    best = summary["best_static"]
    lines = [f"| {summary['subject']} over | {' | '.join(scopes)} |",
             "|---" * (len(scopes) + 1) + "|"]
    for static, by_scope in summary["against_static"].items():
        cells = [format_interval(by_scope[scope]) + (" (best static)" if best[scope] == static
                                                     else "") for scope in scopes]
        lines.append(f"| {static} | {' | '.join(cells)} |")
    return lines


def decisions_table(summary: dict) -> list[str]:
    lines = ["| choice | phase | plan steps | mean batch | drafted by choice | probes | "
             "catch-up tokens | verified drafts | mean draft length | acceptance | "
             "steps to change, per round |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for choice in summary["choices"]:
        for phase in summary["phases"]:
            found = summary["stats"][choice][phase]["decisions"]
            if found is None:
                continue
            steps = found["plan_steps"]
            change = ", ".join("-" if s is None else str(s) for s in found["steps_to_change"])
            lines.append(
                f"| {choice} | {phase} | {steps} | {fmt(found['mean_batch_size'])} | "
                f"{percent(found['drafted_step_share'])} | "
                f"{found['probe_steps'] if steps else '-'} | "
                f"{found['catch_up_tokens'] if steps else '-'} | {found['verifications']} | "
                f"{fmt(found['mean_draft_length'])} | {fmt(found['acceptance_rate'])} | "
                f"{change if steps else '-'} |")
    return lines


def runs_lines(runs: list[dict]) -> list[str]:
    """Where the rounds ran, when the runs that added them (``contexts.jsonl``:
    a resumed run adds a row) differ in machine or source; [] otherwise."""
    first = {}
    for run in runs:
        first.setdefault((run.get("platform"), run.get("git_commit")), run)
    if len(first) <= 1:
        return []
    lines = ["- **Runs that added rounds:** " + "; ".join(
        f"from {run.get('date')}, {run.get('cpu_model')} "
        f"({', '.join(run.get('cpu_isa', []))}), {run.get('platform')}, source "
        f"{run.get('git_commit')}" for run in first.values())]
    if len({platform for platform, _ in first}) > 1:
        lines.append(
            "- **More than one machine:** each round ran whole on one machine, so a "
            "ratio in a round compares choices on one machine; seconds per round, "
            "pooled tok/s and the latency percentiles mix machines (compare them "
            "between choices, not with other runs).")
    return lines


def design_lines(context: dict, trace: list[dict], runs: list[dict] = ()) -> list[str]:
    """Command, date, versions, machine(s), models, and the trace's phases."""
    args = context.get("args", {})
    lines = [f"- **Command:** `{context.get('command', 'python -m benchmarks.run_traffic')}`",
             f"- **Date:** {context.get('date')}; source {context.get('git_commit')}",
             *runs_lines(list(runs)),
             f"- **Versions:** vLLM {context.get('vllm')}, torch {context.get('torch')}, "
             f"vllm-gammatune {context.get('vllm_gammatune')}, Python {context.get('python')}",
             f"- **Machine:** {context.get('cpu_model')} ({', '.join(context.get('cpu_isa', []))}),"
             f" {context.get('machine')}; threads bound {context.get('omp_threads_bind')}",
             f"- **Models:** target {context.get('target')}, draft {context.get('draft')}",
             f"- **Requests:** {args.get('max_tokens')} tokens each (EOS ignored), "
             f"temperature {args.get('temperature')}; kinds {args.get('kinds')}",
             "", "| phase | concurrency | requests | arrivals | kinds | prompt tokens mean / max |",
             "|---|---|---|---|---|---|"]
    for phase in trace:
        tokens = [r["prompt_tokens"] for r in phase["requests"]]
        kinds = defaultdict(int)
        for request in phase["requests"]:
            kinds[request["kind"]] += 1
        arrivals = ("all at once" if phase["request_rate"] == "inf" else
                    f"{phase['request_rate']}/s, burstiness {phase['burstiness']}")
        lines.append(f"| {phase['name']} | {phase['concurrency']} | {phase['num_requests']} | "
                     f"{arrivals} | {', '.join(f'{k} {n}' for k, n in kinds.items())} | "
                     f"{sum(tokens) / len(tokens):.0f} / {max(tokens)} |")
    return lines


def traffic_report(summary: dict, context: dict, trace: list[dict],
                   plot: str | None = None, runs: list[dict] = ()) -> str:
    """The Markdown page of a traffic run; ``runs``: every run that added
    rounds (``contexts.jsonl``)."""
    rounds = summary["rounds"]
    lines = [f"# Served traffic: {', then '.join(summary['phases'])}", "",
             *design_lines(context, trace, runs), "",
             f"{len(rounds)} complete round(s); in each, every choice's server is started "
             "afresh in turn (the first rotating by round), sent the whole trace, phase "
             "after phase, and stopped. Seconds: the client's durations summed over the "
             "phases. Speed-up A over B: B's seconds over A's in the same round; mean and "
             "95% t-interval over rounds. TTFT and TPOT percentiles: over every request of "
             "the complete rounds, as vLLM's client measures them (TTFT from the request's "
             "dispatch, after its wait for a place under the phase's concurrency). Drafted "
             "steps and catch-up tokens: the plugin's counters (its methods only)."
             + (" Traced (`--trace`): for a method without a per-token rule (gammatune) "
                "the trace adds computing the draft's token probabilities; "
                "gammatune_cost computes them anyway." if context.get("args", {}).get("trace")
                else ""), "", "## Whole trace", "",
             *scope_table(summary, WHOLE), ""]
    if summary["against_static"]:
        lines += [f"## {summary['subject']} against each static choice", "",
                  *against_static_table(summary), ""]
    for phase in summary["phases"]:
        lines += [f"## Phase {phase}", "", *scope_table(summary, phase), ""]
    decisions = decisions_table(summary)
    if len(decisions) > 2:
        lines += ["## The plugin's decisions, from its traces", "",
                  "Drafted by choice: plan steps that drafted because the policy chose to "
                  "(not probes, not prompt-pricing drafts). Steps to change: in a phase, the "
                  "steps up to its first step in the other regime than the previous phase's "
                  "(drafting by choice or not); '-': never.", "", *decisions, ""]
    if summary["targets"]:
        lines += ["## Targets", ""] + [
            f"- {'met' if t['met'] else 'NOT met'}: {t['target']}: {t['value']}"
            for t in summary["targets"]] + [""]
    if plot:
        lines += [f"![draft length and batch size of {summary['subject']}, and the client's "
                  f"throughput]({plot})", ""]
    return "\n".join(lines)


#: a traffic run's files in its results folder
ROWS_FILE, TRACE_FILE, SUMMARY_FILE, REPORT_FILE, PLOT_FILE = (
    "traffic.jsonl", "traffic_trace.json", "traffic_summary.json", "traffic.md", "traffic.png")


def draw_plot(out: Path, summary: dict, rows: list[dict]) -> str | None:
    """``PLOT_FILE`` from the first complete round: the subject's trace beside
    the client's throughput of the baseline, the subject and the best static
    choice; None (nothing drawn) without matplotlib, a subject or its trace."""
    subject, rounds = summary["subject"], summary["rounds"]
    if subject not in summary["choices"] or not rounds:
        return None
    traces = complete_traces(rows, len(summary["phases"]))
    shown = dict.fromkeys([summary["baseline"], summary["best_static"].get(WHOLE), subject])
    first = {choice: traces[(choice, rounds[0])] for choice in shown if choice}
    trace_file = first[subject][0].get("trace_file")
    if not trace_file or not (out / trace_file).exists():
        return None
    try:
        from gammatune_tools.bench.traffic_plot import plot_traffic

        plot_traffic(subject, plan_series(out / trace_file, first[subject]), first,
                     out / PLOT_FILE)
    except ImportError:
        return None
    return PLOT_FILE


def write_traffic_report(out: Path, choices: list[str], phase_names: list[str],
                         baseline: str, subject: str | None) -> Path:
    """``SUMMARY_FILE``, ``REPORT_FILE`` and, where it can, ``PLOT_FILE`` from
    the run's rows; the report's path."""
    rows = read_jsonl(out / ROWS_FILE)
    summary = summarize_traffic(rows, choices, phase_names, baseline, subject)
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=1))
    plot = draw_plot(out, summary, rows)
    trace = json.loads((out / TRACE_FILE).read_text())
    path = out / REPORT_FILE
    path.write_text(traffic_report(summary, read_context(out), trace, plot,
                                   read_contexts(out)))
    return path
