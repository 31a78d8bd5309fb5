"""A method against the best static choice, overall and per prompt, from chained paired runs.

    python -m benchmarks.oracle --out DIR --runs RUN,RUN,...

Each ``RUN`` (a folder; a relative one not found as given is looked up
beside ``--out``, so a config's runs and their oracle share one folder) is a
``benchmarks.run_paired`` run of one method (the same in every run, e.g.
``gammatune_cost``) against one static choice (its baseline, e.g.
``no_spec`` or ``vllm_draft_model@3``), on the same prompts at the same
batch sizes. Why chained: only two engines of the real pair fit in memory at
once on the measuring machine, so every static choice gets its own paired
run against the method, and the method's engine is the common yardstick.

Per batch of prompts ``b`` (at batch 1: per prompt) and static choice ``c``:
``r[c][b]`` = the method's tok/s over ``c``'s on that batch, run back to back
(the mean over the run's rounds; the geometric mean over runs of one choice,
e.g. its two engine start orders). Then

- **best static choice in hindsight**: the choice the method fares worst
  against over the whole prompt set (the lowest mean over batches of
  ``r[c][b]``), and that mean with its 95% t-interval over batches;
- **per-prompt oracle**: per batch, the best choice for that batch in
  hindsight, ``o[b] = min_c r[c][b]``; the mean of ``o`` over batches with
  its 95% t-interval, and how often each choice is the oracle's pick.

The per-prompt minimum is taken over noisy ratios, so it favours the oracle:
a ratio at or above 1 against it is a conservative reading. How much it
favours it is measured where a choice ran more than once (e.g. both start
orders): the spread of its per-batch log ratios between runs gives one
run's noise ``sigma``, and the **noise floor** is the oracle's expected
ratio if every choice were exactly as fast as the method on every batch,
``E[exp(min_c N(0, sigma^2 / runs_c))]`` (simulated). Choices measured in
different runs meet only through the method's engine, which differs from
run to run as any engine instance does (``benchmarks.run_paired``: A/A runs).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from gammatune_tools.bench.paired import ROWS_FILE, baseline_first
from gammatune_tools.bench.records import read_jsonl
from gammatune_tools.bench.stats import ratio_interval
from gammatune_tools.bench.tables import fmt, format_interval


def batch_ratios(rows: list[dict], method: str, baseline: str) -> dict[tuple[int, int], float]:
    """(batch size, batch) -> the method's tok/s over the baseline's on that
    batch, averaged over the rounds in which both ran it."""
    seconds: dict[tuple[int, int, int], dict[str, float]] = defaultdict(dict)
    for row in rows:
        if row["method"] in (method, baseline):
            key = (row["batch_size"], row["round"], row["batch"])
            seconds[key][row["method"]] = row["wall_seconds"] / row["output_tokens"]
    per_batch: dict[tuple[int, int], list[float]] = defaultdict(list)
    for (size, _, batch), pair in seconds.items():
        if len(pair) == 2:
            per_batch[(size, batch)].append(pair[baseline] / pair[method])
    return {key: statistics.mean(ratios) for key, ratios in per_batch.items()}


def read_chain(directories: list[Path]) -> tuple[str, dict[str, list[dict]]]:
    """(the method, static choice -> the ``batch_ratios`` of each of its runs)."""
    methods, by_choice = set(), defaultdict(list)
    for directory in directories:
        if not ((directory / "context.json").exists() and (directory / ROWS_FILE).exists()):
            raise ValueError(f"--runs: {directory} is not a paired.py run "
                             "(it needs context.json and paired.jsonl)")
        args = json.loads((directory / "context.json").read_text())["args"]
        engines = baseline_first(args["methods"].split(","), args.get("baseline"))
        if len(engines) != 2:
            raise ValueError(f"{directory}: a chained run pairs one method with one "
                             f"static choice, got engines {engines}")
        choice, method = engines
        methods.add(method)
        by_choice[choice].append(batch_ratios(read_jsonl(directory / ROWS_FILE),
                                              method, choice))
    if len(methods) != 1:
        raise ValueError(f"the runs compare different methods ({', '.join(sorted(methods))}); "
                         "chain runs of one method against the static choices")
    return methods.pop(), dict(by_choice)


def log_ratios(runs: list[dict]) -> dict[tuple[int, int], list[float]]:
    """Per batch that every run of a choice measured, each run's log ratio."""
    common = set.intersection(*(set(run) for run in runs))
    return {key: [math.log(run[key]) for run in runs] for key in common}


def joined(by_choice: dict[str, list[dict]]) -> dict[str, dict[tuple[int, int], float]]:
    """Per choice, its runs' ratios joined by the geometric mean per batch."""
    return {choice: {key: math.exp(statistics.mean(logs))
                     for key, logs in log_ratios(runs).items()}
            for choice, runs in by_choice.items()}


def run_noise(by_choice: dict[str, list[dict]]) -> float | None:
    """One run's noise in a batch's log ratio: the pooled standard deviation
    between runs of the choices that ran more than once (None: none did)."""
    squares, dof = 0.0, 0
    for runs in by_choice.values():
        for logs in log_ratios(runs).values():
            mean = statistics.mean(logs)
            squares += sum((x - mean) ** 2 for x in logs)
            dof += len(logs) - 1
    return math.sqrt(squares / dof) if dof else None


def noise_floor(sigma: float, runs_per_choice: list[int], draws: int = 20000,
                seed: int = 0) -> float:
    """The oracle's expected ratio from noise alone: every choice exactly as
    fast as the method, each measured with one run's noise ``sigma`` over
    its number of runs (module docstring)."""
    rng = random.Random(seed)
    total = 0.0
    for _ in range(draws):
        total += math.exp(min(rng.gauss(0.0, sigma / math.sqrt(n)) for n in runs_per_choice))
    return total / draws


def oracle(by_choice: dict[str, list[dict]]) -> list[dict]:
    """Per batch size: the method against each static choice, the best one
    in hindsight, the per-batch oracle and its noise floor (module
    docstring)."""
    ratios = joined(by_choice)
    sigma = run_noise(by_choice)
    floor = (None if sigma is None
             else noise_floor(sigma, [len(by_choice[choice]) for choice in ratios]))
    sizes = sorted({size for per_batch in ratios.values() for size, _ in per_batch})
    summary = []
    for size in sizes:
        batches = sorted(set.intersection(*({b for s, b in per_batch if s == size}
                                            for per_batch in ratios.values())))
        if not batches:
            continue
        against = {choice: [per_batch[(size, b)] for b in batches]
                   for choice, per_batch in ratios.items()}
        best = min(against, key=lambda choice: statistics.mean(against[choice]))
        picks = [min(against, key=lambda choice: against[choice][i])
                 for i in range(len(batches))]
        per_prompt = [against[pick][i] for i, pick in enumerate(picks)]
        summary.append({
            "batch_size": size, "batches": len(batches),
            "against": {choice: ratio_interval(values) for choice, values in against.items()},
            "best_static": best,
            "oracle": ratio_interval(per_prompt),
            "run_noise": sigma, "noise_floor": floor,
            "oracle_picks": {choice: picks.count(choice) for choice in against},
            "per_batch": [{"batch": b, "pick": pick, "ratio": ratio}
                          for b, pick, ratio in zip(batches, picks, per_prompt)]})
    return summary


def oracle_report(method: str, summary: list[dict]) -> str:
    lines = [f"# `{method}` against the best static choice and the per-prompt oracle", "",
             "Chained paired runs: each static choice ran in its own paired run against "
             f"`{method}`. Ratio: `{method}` tok/s over the choice's, per batch of prompts "
             "run back to back; mean and 95% t-interval over batches. Oracle: per batch, "
             "the choice that was fastest on it (in hindsight); the minimum over noisy "
             "ratios favours the oracle: the noise floor is what it would read if every "
             "choice were exactly as fast as the method (one run's noise from the choices "
             "that ran more than once).", "",
             "| batch | batches | against each static choice | best static choice | "
             "against it | per-prompt oracle | oracle's picks | one run's noise | "
             "noise floor |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in summary:
        against = "; ".join(f"{choice} {format_interval(interval)}"
                            for choice, interval in sorted(row["against"].items()))
        picks = ", ".join(f"{choice} {count}" for choice, count
                          in sorted(row["oracle_picks"].items()) if count)
        lines.append(f"| {row['batch_size']} | {row['batches']} | {against} | "
                     f"{row['best_static']} | "
                     f"{format_interval(row['against'][row['best_static']])} | "
                     f"{format_interval(row['oracle'])} | {picks} | "
                     f"{fmt(row['run_noise'], 3)} | {fmt(row['noise_floor'], 3)} |")
    return "\n".join(lines + [""])


def run_folder(name: str, out: Path) -> Path:
    """``name`` as given if it exists or is absolute, else beside ``out``."""
    path = Path(name)
    return path if path.exists() or path.is_absolute() else out.parent / name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where oracle.md and oracle.json go")
    parser.add_argument("--runs", required=True, metavar="RUN,RUN",
                        help="paired.py run folders (relative ones not found as given: "
                             "beside --out)")
    args = parser.parse_args()
    out = Path(args.out)
    try:
        method, by_choice = read_chain([run_folder(name, out) for name in args.runs.split(",")])
    except ValueError as error:
        sys.exit(str(error))
    summary = oracle(by_choice)
    out.mkdir(parents=True, exist_ok=True)
    (out / "oracle.md").write_text(oracle_report(method, summary))
    (out / "oracle.json").write_text(json.dumps({"method": method, "summary": summary},
                                                indent=1))
    print(out / "oracle.md")


if __name__ == "__main__":
    main()
