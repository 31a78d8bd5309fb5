"""One cell of the README's table from its interleaved rounds: every method's
tokens/s against no speculation, the best fixed K and the per-prompt
oracle, each with a two-level bootstrap interval, beside the counts.

A cell's rows are ``paired.summarize``'s shape (one per round, unit and
method: ``output_tokens``, ``wall_seconds`` and the counters). A unit is
what went to every engine back to back: a prompt at batch 1, a batch of
prompts at a larger size (it counts once: its prompts share one wall
time), a phase of the served trace. Every ratio is of throughput (a
method's tokens over its seconds, summed over the units) in one round
against another method's in that same round, averaged over the rounds;
the bootstrap (``stats.two_level_bootstrap``) resamples units and rounds
together. The best fixed K and the oracle are chosen again inside every
resample, so the interval holds the luck of the choice too.

Fixed choices: vLLM's ``draft_model`` and ``ngram`` at a K. The oracle
takes, per unit, the fixed choice with the most tokens/s on it over the
rounds, in hindsight.
"""

from __future__ import annotations

from gammatune_tools.bench.methods import NO_SPECULATION, VLLM_FIXED_K, VLLM_NGRAM, method_name
from gammatune_tools.bench.paired import complete_rounds, served_counts, summarize
from gammatune_tools.bench.stats import two_level_bootstrap, verdict

#: the methods whose draft length is fixed before the run
FIXED = (*VLLM_FIXED_K, VLLM_NGRAM)
#: the bootstrap's seed: the manifest's intervals and the results page's
#: detail draw the same resamples, so a ratio written twice reads the same
SEED = 0
#: what a comparison is against: a method's name, or one of these
BEST_FIXED, ORACLE = "best fixed K", "per-prompt oracle"


def is_fixed(engine: str) -> bool:
    return method_name(engine) in FIXED


def arrays(rows: list[dict], methods: list[str], num_units: int):
    """(tokens, seconds), each [method, round, unit], over the rounds every
    method completed (renumbered 0..); ValueError when there are none."""
    import numpy

    done = sorted(complete_rounds(rows, methods, num_units).get(rows[0]["batch_size"], set())
                  if rows else [])
    if not done:
        raise ValueError(f"no complete round of {', '.join(methods)} over {num_units} units")
    place = {r: i for i, r in enumerate(done)}
    index = {m: i for i, m in enumerate(methods)}
    tokens = numpy.zeros((len(methods), len(done), num_units))
    seconds = numpy.zeros_like(tokens)
    for row in rows:
        if row["round"] in place and row["method"] in index:
            at = (index[row["method"]], place[row["round"]], row["batch"])
            tokens[at], seconds[at] = row["output_tokens"], row["wall_seconds"]
    return tokens, seconds


def _throughput(tokens, seconds, rounds, units):
    """[method, round] tokens/s over the chosen units, for the chosen rounds."""
    picked = (slice(None), rounds[:, None], units[None, :])
    return tokens[picked].sum(-1) / seconds[picked].sum(-1)


def _best(tokens, seconds, rounds, units, fixed: list[int]) -> int:
    """The fixed choice with the most tokens/s over the chosen rounds and units."""
    picked = (slice(None), rounds[:, None], units[None, :])
    rate = tokens[picked].sum((1, 2)) / seconds[picked].sum((1, 2))
    return max(fixed, key=lambda m: rate[m])


def _oracle_throughput(tokens, seconds, rounds, units, fixed: list[int]):
    """[round] tokens/s of the per-unit best fixed choice (chosen over the rounds)."""
    import numpy

    sub_t, sub_s = tokens[:, rounds][:, :, units], seconds[:, rounds][:, :, units]
    rate = sub_t[fixed].sum(1) / sub_s[fixed].sum(1)  # [fixed, unit]
    choice = numpy.asarray(fixed)[rate.argmax(0)]
    columns = numpy.arange(len(units))
    return (sub_t[choice, :, columns].sum(0) / sub_s[choice, :, columns].sum(0))


def ratio_statistic(tokens, seconds, subject: int, against, fixed: list[int]):
    """``statistic(rounds, units)``: the subject's tokens/s over ``against``'s
    (a method's index, ``BEST_FIXED`` or ``ORACLE``) per round, averaged."""
    def statistic(rounds, units):
        rate = _throughput(tokens, seconds, rounds, units)
        if against == ORACLE:
            base = _oracle_throughput(tokens, seconds, rounds, units, fixed)
        elif against == BEST_FIXED:
            base = rate[_best(tokens, seconds, rounds, units, fixed)]
        else:
            base = rate[against]
        return float((rate[subject] / base).mean())

    return statistic


def k_label(engine: str) -> str:
    """``vllm_draft_model@3`` -> "K=3", ``vllm_ngram@5`` -> "n-gram K=5"."""
    k = engine.partition("@")[2] or "?"
    return f"n-gram K={k}" if method_name(engine) == VLLM_NGRAM else f"K={k}"


def comparison(tokens, seconds, methods: list[str], subject: str, against: str,
               fixed: list[int], seed: int) -> dict:
    index = methods.index
    target = against if against in (BEST_FIXED, ORACLE) else index(against)
    point, low, high = two_level_bootstrap(
        ratio_statistic(tokens, seconds, index(subject), target, fixed),
        tokens.shape[1], tokens.shape[2], seed=seed)
    return {"method": subject, "against": against, "ratio": point, "low": low, "high": high,
            "verdict": verdict(low, high)}


def cell_summary(rows: list[dict], methods: list[str], num_units: int,
                 seed: int = SEED) -> dict:
    """The cell's numbers: per method tok/s per round and the counts; the
    best fixed choice; every other method against the best fixed K, no
    speculation and the oracle, and the best fixed K against no speculation
    (the comparisons with no speculation where it ran)."""
    import numpy

    tokens, seconds = arrays(rows, methods, num_units)
    fixed = [i for i, m in enumerate(methods) if is_fixed(m)]
    if not fixed:
        raise ValueError(f"a cell needs fixed choices; got {', '.join(methods)}")
    all_rounds, all_units = (numpy.arange(n) for n in tokens.shape[1:])
    best = methods[_best(tokens, seconds, all_rounds, all_units, fixed)]
    rate = _throughput(tokens, seconds, all_rounds, all_units)
    counts = {row["method"]: row for row in summarize(rows, methods, num_units)}
    no_spec = [NO_SPECULATION] if NO_SPECULATION in methods else []
    comparisons = [comparison(tokens, seconds, methods, best, against, fixed, seed)
                   for against in no_spec]
    for subject in methods:
        if subject != NO_SPECULATION and not is_fixed(subject):
            comparisons += [comparison(tokens, seconds, methods, subject, against, fixed, seed)
                            for against in (BEST_FIXED, *no_spec, ORACLE)]
    return {
        "rounds": int(tokens.shape[1]), "units": num_units, "best_fixed": best,
        "best_fixed_label": k_label(best),
        "methods": {m: {"tokens_per_second": [float(v) for v in rate[i]],
                        **{key: counts[m][key] for key in
                           ("target_passes_per_token", "draft_forwards_per_token",
                            "accepted_length")}}
                    for i, m in enumerate(methods)},
        "comparisons": comparisons}


def traffic_rows_as_batches(rows: list[dict]) -> list[dict]:
    """``benchmarks.run_traffic`` rows in ``summarize``'s shape: each phase of
    a round's trace one unit (batch size 1, the phase's place as its batch)."""
    return [{"batch_size": 1, "round": r["round"], "batch": r["phase_index"],
             "method": r["choice"], "position": r["position"],
             "wall_seconds": r["duration"], "output_tokens": r["total_output_tokens"] or 0,
             **served_counts(r["metrics_delta"])}
            for r in rows]
