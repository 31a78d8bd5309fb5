"""Per-token analysis of draft traces: calibration and projected tokens per second.

    python -m benchmarks.token_traces TRACE [TRACE ...] --out DIR \\
        [--cpu-costs T0,T1,D0,D1] [--cost-ratios 10,20] [--max-k 8] [--plot]

Reads ``VLLM_GAMMATUNE_TRACE`` files (JSON lines; ``{"event": ...}`` plan
lines are skipped) and writes ``DIR/token_traces.md`` (printed too),
``DIR/token_traces.json`` (the same numbers) and, with ``--plot``,
``DIR/reliability.png``.

Why: the per-token stop (``policies/cost_aware/token_stop.py``) rests on two
things a trace can check without running an engine: whether its estimate of
each token's acceptance is calibrated, and how many tokens per second its
stop would make against fixed draft lengths and an oracle.

1. Reliability: labelled tokens (of one verification, token ``i`` is
   accepted if ``i < num_accepted_tokens``, rejected if
   ``i == num_accepted_tokens``; later ones were never tested) in bins of
   width 0.1 of a predictor: mean prediction against observed acceptance,
   plus the Brier score and log loss, for ``predicted_acceptance`` (the
   method's online estimate, in ``gammatune_cost`` traces) and the raw
   ``token_probs`` (the draft's own probability, the estimate's cold start).
2. Projection (``gammatune_tools.bench.token_projection``): under the renewal
   approximation, each verification that drafted at least ``--max-k``
   tokens is a sample of the draft's next tokens and of how many the target
   accepts; tokens per second of no speculation, every fixed K, the
   per-request and per-token oracles and the plugin's rule, at the given
   costs. A fixed-K trace at K = max-k gives uncensored samples.
3. Decode cycles by kept draft length (``gammatune_cost`` traces, from their
   plan lines): at batch 1, each drafting decode step's cycle as the clock
   read it (the wall time from its plan to the next, ``previous_cycle_seconds``
   of the next plan line; no catch-up, no prompt chunk on either side), by
   the draft length verification saw (the next step's scheduled tokens minus
   one): the median measured seconds against the median price the model of
   that plan gave such a cycle: ``Costs.step(k)`` at its ``step_costs``
   plus ``D1 * s``, since the first pass also runs over the plan's ``s``
   scheduled tokens, one draft pass per kept token (at least one). A cycle
   whose rule drafted a token and then dropped it ran one pass more than it
   kept. Whether each length costs what the model says decides how far the
   rule should draft.

A request is one ``req_id`` of one file until its ``step`` fails to increase
(a file may hold several runs whose ``req_id`` values repeat).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from gammatune_tools.bench.plots import pyplot
from gammatune_tools.bench.records import read_jsonl
from gammatune_tools.bench.tables import fmt
from gammatune_tools.bench.token_projection import (RATE_ITERATIONS, Costs, cost_structures,
                                                    project, projection_samples)
from gammatune_tools.bench.traces import Verification, read_traces, token_labels
from vllm_gammatune.policies.cost_aware.token_acceptance import PROB_FLOOR

#: bins of width 1 / NUM_BINS of a predictor in [0, 1]
NUM_BINS = 10
#: the predictors of the reliability tables: trace field -> description
PREDICTORS = {
    "predicted_acceptance": "The method's online estimate (predicted_acceptance)",
    "token_probs": "The draft's own probability (token_probs, the cold start)",
}


@dataclass(frozen=True)
class Cycle:
    """One batch-1 drafting decode step as the clock read it (module docstring, 3)."""

    kept: int
    measured_seconds: float
    model_seconds: float


def read_cycles(paths: list[Path]) -> list[Cycle]:
    """The measured batch-1 decode cycles of the files' plan lines."""
    cycles = []
    for path in paths:
        plans = [row for row in read_jsonl(path) if row.get("event") == "plan"]
        for plan, after in zip(plans, plans[1:]):
            seconds = after.get("previous_cycle_seconds")
            if (plan["kind"] != "draft" or plan["batch_size"] != 1 or plan["has_prefill"]
                    or plan["catch_up_tokens"] or after["has_prefill"]
                    or after["batch_size"] != 1 or seconds is None):
                continue
            kept = after["num_scheduled_tokens"] - 1
            costs = Costs("plan", *plan["step_costs"])
            # the first pass also runs over the step's scheduled tokens, and
            # a draft that kept no token still ran it
            model = (costs.step(kept) + costs.D1 * plan["num_scheduled_tokens"]
                     + (costs.draft_pass if kept == 0 else 0.0))
            cycles.append(Cycle(kept, seconds, model))
    return cycles


def cycles_by_length(cycles: list[Cycle]) -> list[dict]:
    """Per kept length: cycles, median measured and model seconds, their ratio."""
    rows = []
    for kept in sorted({c.kept for c in cycles}):
        mine = [c for c in cycles if c.kept == kept]
        measured = statistics.median(c.measured_seconds for c in mine)
        model = statistics.median(c.model_seconds for c in mine)
        rows.append({"kept": kept, "cycles": len(mine), "measured_seconds": measured,
                     "model_seconds": model,
                     "measured_over_model": measured / model if model > 0 else None})
    return rows


def labelled_predictions(verifications: list[Verification],
                         field: str) -> list[tuple[float, int]]:
    """(prediction, label) of every labelled token that has ``field``."""
    pairs = []
    for v in verifications:
        predictions = getattr(v, field)
        if predictions is None:
            continue
        for p, label in zip(predictions,
                            token_labels(v.num_draft_tokens, v.num_accepted_tokens)):
            if label is not None:
                pairs.append((p, label))
    return pairs


def log_loss_term(p: float, label: int) -> float:
    """-log of the probability ``p`` gave the label (``p`` kept inside
    [PROB_FLOOR, 1 - PROB_FLOOR], as the acceptance model keeps ``q``)."""
    p = min(1.0 - PROB_FLOOR, max(PROB_FLOOR, p))
    return -math.log(p if label else 1.0 - p)


def reliability(pairs: list[tuple[float, int]]) -> dict:
    """Bins of the prediction (non-empty ones: edges, tokens, mean
    prediction, observed acceptance), Brier score and log loss."""
    sums = [[0, 0.0, 0] for _ in range(NUM_BINS)]  # tokens, predictions, accepted
    for p, label in pairs:
        row = sums[min(max(int(p * NUM_BINS), 0), NUM_BINS - 1)]
        row[0] += 1
        row[1] += p
        row[2] += label
    bins = [{"low": i / NUM_BINS, "high": (i + 1) / NUM_BINS, "tokens": n,
             "mean_prediction": total / n, "observed": accepted / n}
            for i, (n, total, accepted) in enumerate(sums) if n]
    if not pairs:
        return {"tokens": 0, "bins": [], "brier": None, "log_loss": None}
    brier = sum((p - label) ** 2 for p, label in pairs) / len(pairs)
    log_loss = sum(log_loss_term(p, label) for p, label in pairs) / len(pairs)
    return {"tokens": len(pairs), "bins": bins, "brier": brier, "log_loss": log_loss}


def analyse(verifications: list[Verification], structures: list[Costs], max_k: int) -> dict:
    samples = projection_samples(verifications, max_k)
    projections = [project(samples, costs, max_k) for costs in structures] if samples else []
    labelled = sum(sum(label is not None for label in
                       token_labels(v.num_draft_tokens, v.num_accepted_tokens))
                   for v in verifications)
    return {
        "counts": {"verification_lines": len(verifications),
                   "projection_lines": len(samples),
                   "labelled_tokens": labelled,
                   "requests": len({v.request for v in verifications})},
        "reliability": {field: reliability(labelled_predictions(verifications, field))
                        for field in PREDICTORS},
        "max_k": max_k,
        "projections": projections,
    }


def counts_lines(counts: dict, max_k: int) -> list[str]:
    return ["## Counts", "",
            f"Verification lines read, those used for the projection (drafted at "
            f"least max-k = {max_k} tokens, with token_probs), labelled tokens "
            f"(accepted or first rejected) and requests.", "",
            "| verification lines | projection lines | labelled tokens | requests |",
            "|---|---|---|---|",
            f"| {counts['verification_lines']} | {counts['projection_lines']} | "
            f"{counts['labelled_tokens']} | {counts['requests']} |", ""]


def reliability_lines(results: dict) -> list[str]:
    lines = ["## Reliability", ""]
    for field, description in PREDICTORS.items():
        result = results[field]
        lines += [f"### {description}", ""]
        if not result["tokens"]:
            lines += [f"No labelled token has `{field}`.", ""]
            continue
        lines += [f"Labelled tokens in bins of width {1 / NUM_BINS:g} of the prediction: "
                  "mean prediction against the observed acceptance rate (calibrated: "
                  f"equal). Over all {result['tokens']} labelled tokens: Brier score "
                  f"{fmt(result['brier'], 4)}, log loss {fmt(result['log_loss'], 4)}.", "",
                  "| bin | tokens | mean prediction | observed acceptance |",
                  "|---|---|---|---|"]
        lines += [f"| {b['low']:.1f}-{b['high']:.1f} | {b['tokens']} | "
                  f"{fmt(b['mean_prediction'], 3)} | {fmt(b['observed'], 3)} |"
                  for b in result["bins"]]
        lines.append("")
    return lines


def projection_lines(projections: list[dict], max_k: int) -> list[str]:
    lines = ["## Projected tokens per second", "",
             "Renewal approximation: each verification that drafted at least "
             f"max-k = {max_k} tokens is an independent sample of the draft's next "
             "tokens and of how many the target accepts; a strategy drafting k there "
             "emits min(accepted, k) + 1 tokens. Batch 1; a step costs "
             "T0 + T1 * (1 + k) + k * (D0 + D1) seconds.", ""]
    if not projections:
        return lines + [f"No verification drafted at least {max_k} tokens with "
                        "token_probs: nothing to project.", ""]
    for p in projections:
        c = p["costs"]
        lines += [f"### {p['name']} (T0={c['T0']:g}, T1={c['T1']:g}, D0={c['D0']:g}, "
                  f"D1={c['D1']:g})", "",
                  "Per strategy: tokens/s (in the cost's time unit) and relative to no "
                  "speculation, tokens emitted per target pass, draft passes per token "
                  "emitted and mean draft length per step.", "",
                  "| strategy | tok/s | vs no speculation | tokens / target pass | "
                  "draft passes / token | mean draft length |", "|---|---|---|---|---|---|"]
        lines += [f"| {s['strategy']} | {fmt(s['tokens_per_second'], 3)} | "
                  f"{fmt(s['relative'], 3)} | {fmt(s['tokens_per_target_pass'], 3)} | "
                  f"{fmt(s['draft_passes_per_token'], 3)} | "
                  f"{fmt(s['mean_draft_length'], 2)} |" for s in p["strategies"]]
        lines += ["", f"Best fixed K: {p['best_fixed_k']}. Rule / best fixed K: "
                  f"{fmt(p['rule_vs_best_fixed'], 3)} (priced at R = "
                  f"{fmt(p['rule_rate'], 4)} tok/s after {RATE_ITERATIONS} fixed-point "
                  f"iterations from the best fixed K's). Rule / per-request oracle: "
                  f"{fmt(p['rule_vs_per_request_oracle'], 3)}. Per-token oracle / best "
                  f"fixed K: {fmt(p['oracle_vs_best_fixed'], 3)}. The rule's share of the "
                  f"per-token oracle's gain over the best fixed K: "
                  f"{fmt(p['rule_share_of_oracle_gain'], 3)}.", ""]
    return lines


def cycle_lines(rows: list[dict]) -> list[str]:
    lines = ["## Decode cycles by kept draft length", "",
             "Batch 1, drafting decode steps without catch-up, by the draft length "
             "verified: median wall seconds from the step's plan to the next against "
             "the median price of the model of that plan (one draft pass per kept "
             "token).", ""]
    if not rows:
        return lines + ["No measured batch-1 drafting cycle (plan lines of a "
                        "gammatune_cost trace).", ""]
    lines += ["| kept draft tokens | cycles | measured s | model s | measured / model |",
              "|---|---|---|---|---|"]
    lines += [f"| {r['kept']} | {r['cycles']} | {fmt(r['measured_seconds'], 3)} | "
              f"{fmt(r['model_seconds'], 3)} | {fmt(r['measured_over_model'], 2)} |"
              for r in rows]
    return lines + [""]


def build_markdown(result: dict, paths: list[Path]) -> str:
    lines = ["# Per-token analysis of draft traces", "",
             "Traces: " + ", ".join(f"`{p}`" for p in paths), ""]
    lines += counts_lines(result["counts"], result["max_k"])
    lines += reliability_lines(result["reliability"])
    lines += projection_lines(result["projections"], result["max_k"])
    lines += cycle_lines(result.get("cycles", []))
    return "\n".join(lines)


def plot_reliability(results: dict, path: Path) -> bool:
    """Predicted against observed per bin, both predictors; False without
    matplotlib."""
    try:
        plt = pyplot()
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", label="calibrated")
    for field, description in PREDICTORS.items():
        bins = results[field]["bins"]
        if bins:
            ax.plot([b["mean_prediction"] for b in bins], [b["observed"] for b in bins],
                    marker="o", label=description)
    ax.set_xlabel("mean prediction")
    ax.set_ylabel("observed acceptance")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title("Reliability of per-token acceptance predictors", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def cpu_costs(text: str) -> list[float]:
    values = floats(text)
    if len(values) != 4:
        raise argparse.ArgumentTypeError("expected four numbers: T0,T1,D0,D1")
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="+", type=Path,
                        help="VLLM_GAMMATUNE_TRACE files (JSON lines), read in this order")
    parser.add_argument("--out", type=Path, required=True,
                        help="directory for token_traces.md/.json (and reliability.png)")
    parser.add_argument("--cpu-costs", type=cpu_costs, default=None,
                        help="T0,T1,D0,D1: measured seconds of a target step "
                             "(T0 + T1 * tokens verified) and of a draft pass (D0 + D1); "
                             "adds the structure 'cpu (measured costs)'")
    parser.add_argument("--cost-ratios", type=floats, default=[10.0, 20.0],
                        help="c values of GPU-like structures: T0=1, T1=0, D0=1/c, D1=0 "
                             "(default 10,20)")
    parser.add_argument("--max-k", type=int, default=8,
                        help="largest draft length projected; only verifications that "
                             "drafted at least this many tokens are samples (default 8)")
    parser.add_argument("--plot", action="store_true",
                        help="also write reliability.png (needs matplotlib)")
    args = parser.parse_args(argv)
    if args.max_k < 1:
        parser.error("--max-k must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    verifications = read_traces(args.traces)
    result = analyse(verifications, cost_structures(args.cpu_costs, args.cost_ratios),
                     args.max_k)
    result["cycles"] = cycles_by_length(read_cycles(args.traces))
    args.out.mkdir(parents=True, exist_ok=True)
    markdown = build_markdown(result, args.traces)
    (args.out / "token_traces.md").write_text(markdown + "\n")
    (args.out / "token_traces.json").write_text(json.dumps(result, indent=1))
    print(markdown)
    if args.plot and not plot_reliability(result["reliability"], args.out / "reliability.png"):
        print("matplotlib is not importable: reliability.png skipped")


if __name__ == "__main__":
    main()
