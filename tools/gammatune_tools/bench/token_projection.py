"""Projected tokens per second of draft strategies, from the samples of a trace.

Under the *renewal approximation*: every verification that drafted at least
``max_k`` tokens (with their ``token_probs``) is one independent sample of
what the draft would propose from that position and how many of its tokens
the target accepts (``a``, capped at max-k); a strategy drafting ``k``
tokens there emits ``min(a, k) + 1``. The samples are taken as they come
(file order), as if each step started where the trace's did, whatever the
strategy emitted before: what a strategy's choices do to the text that
follows is ignored. Batch 1; a target step verifying ``n`` tokens
(1 + draft length) costs ``T0 + T1 * n`` seconds, a draft pass ``D0 + D1``,
and drafting ``k`` tokens costs ``k`` passes.

Strategies: no speculation; fixed K = 1..max-k; the per-token oracle
(drafts exactly the tokens the target accepts, max-k if it accepts them
all); the plugin's rule, simulated with its own ``rule_draft`` and
``TokenAcceptanceModel`` (learning online from what each verification would
have shown, the request's offset starting at 0 per request), priced against
``R``, the long-run tokens per second, found by fixed-point iteration from
the best fixed K's (a token the rule drafted and then left unverified still
costs its pass); and the per-request oracle, the best static choice (no
speculation or one fixed K) for each request in hindsight, on that
request's samples. ``benchmarks.token_traces`` reads the traces and writes
the tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from gammatune_tools.bench.traces import Verification
from vllm_gammatune.policies.cost_aware.token_acceptance import TokenAcceptanceModel, logit
from vllm_gammatune.policies.cost_aware.token_stop import TokenPrices, rule_draft


#: simulations of the rule in the fixed-point search for its rate R
RATE_ITERATIONS = 4


@dataclass(frozen=True)
class Costs:
    """Seconds of a batch-1 step: target ``T0 + T1 * n`` for n verified
    tokens, one draft pass ``D0 + D1``."""

    name: str
    T0: float
    T1: float
    D0: float
    D1: float

    @property
    def draft_pass(self) -> float:
        return self.D0 + self.D1

    def step(self, k: int) -> float:
        """Seconds of a step that drafts ``k`` tokens and verifies them."""
        return self.T0 + self.T1 * (1 + k) + k * self.draft_pass


@dataclass(frozen=True)
class Sample:
    """A verification that drafted at least max-k tokens (renewal sample)."""

    request: tuple
    #: tokens accepted, capped at max-k
    accepted: int
    #: the draft's probabilities of its first max-k tokens
    token_probs: list[float]


def projection_samples(verifications: list[Verification], max_k: int) -> list[Sample]:
    return [Sample(v.request, min(v.num_accepted_tokens, max_k), v.token_probs[:max_k])
            for v in verifications
            if v.num_draft_tokens >= max_k and v.token_probs is not None
            and len(v.token_probs) >= max_k]


def outcome(samples: list[Sample], lengths: list[int], costs: Costs,
            passes: list[int] | None = None) -> dict:
    """Totals of drafting ``lengths[j]`` tokens at sample j (in ``passes[j]``
    draft passes, default as many as tokens)."""
    tokens = sum(min(s.accepted, k) + 1 for s, k in zip(samples, lengths))
    seconds = sum(costs.step(k) for k in lengths)
    if passes is not None:
        seconds += costs.draft_pass * (sum(passes) - sum(lengths))
    drafted = sum(lengths)
    return {"tokens_per_second": tokens / seconds,
            "tokens_per_target_pass": tokens / len(samples),
            "draft_passes_per_token": drafted / tokens,
            "mean_draft_length": drafted / len(samples)}


def rule_lengths(samples: list[Sample], costs: Costs, rate: float,
                 max_k: int) -> tuple[list[int], list[int]]:
    """The plugin's per-token stop over the samples in order, priced at
    ``rate`` tokens/s, its acceptance model (fresh) learning online from what
    each verification would have shown: (lengths kept, draft passes run)."""
    model = TokenAcceptanceModel()
    prices = TokenPrices(rate=rate, per_token=costs.T1 + costs.D1, per_pass=costs.draft_pass)
    biases: dict[tuple, float] = {}
    lengths, passes = [], []
    for sample in samples:
        bias = biases.get(sample.request, 0.0)
        features = [logit(q) for q in sample.token_probs]
        k, run = rule_draft(features, model, prices, cap=max_k, request_bias=bias)
        biases[sample.request] = model.learn(features[:k], min(sample.accepted, k), bias)
        lengths.append(k)
        passes.append(run)
    return lengths, passes


def rule_fixed_point(samples: list[Sample], costs: Costs, start_rate: float,
                     max_k: int) -> tuple[list[int], list[int], list[float]]:
    """The rule's lengths at the rate R it achieves: from ``start_rate``, each
    simulation's tokens/s becomes the next one's R. Returns the last
    simulation's lengths and passes and the rates [R_0 = start, R_1, ...]:
    the last simulation was priced at ``rates[-2]`` and achieved ``rates[-1]``."""
    rates = [start_rate]
    for _ in range(RATE_ITERATIONS):
        lengths, passes = rule_lengths(samples, costs, rates[-1], max_k)
        rates.append(outcome(samples, lengths, costs, passes)["tokens_per_second"])
    return lengths, passes, rates


def project(samples: list[Sample], costs: Costs, max_k: int) -> dict:
    """Every strategy's outcome under ``costs``, and the summary ratios."""
    rows = {"no speculation": outcome(samples, [0] * len(samples), costs)}
    fixed = {K: outcome(samples, [K] * len(samples), costs) for K in range(1, max_k + 1)}
    rows.update({f"fixed K={K}": row for K, row in fixed.items()})
    best_k = max(fixed, key=lambda K: fixed[K]["tokens_per_second"])
    best = fixed[best_k]["tokens_per_second"]
    rows["per-request oracle"] = outcome(samples, per_request_best(samples, costs, max_k),
                                         costs)
    rows["per-token oracle"] = outcome(samples, [s.accepted for s in samples], costs)
    lengths, passes, rates = rule_fixed_point(samples, costs, best, max_k)
    rows["rule (gammatune_cost)"] = outcome(samples, lengths, costs, passes)
    base = rows["no speculation"]["tokens_per_second"]
    rule, oracle = (rows[name]["tokens_per_second"]
                    for name in ("rule (gammatune_cost)", "per-token oracle"))
    return {
        "name": costs.name,
        "costs": {"T0": costs.T0, "T1": costs.T1, "D0": costs.D0, "D1": costs.D1},
        "strategies": [{"strategy": name, **row,
                        "relative": row["tokens_per_second"] / base}
                       for name, row in rows.items()],
        "best_fixed_k": best_k,
        "rule_rate": rates[-2],
        "rule_rate_iterations": rates,
        "rule_vs_best_fixed": rule / best,
        "oracle_vs_best_fixed": oracle / best,
        # of what the per-token oracle gains over the best fixed K, the
        # rule's share (1: all of it; 0: none; below 0: it loses)
        "rule_share_of_oracle_gain": (rule - best) / (oracle - best) if oracle > best else None,
        "rule_vs_per_request_oracle": rule / rows["per-request oracle"]["tokens_per_second"],
    }


def per_request_best(samples: list[Sample], costs: Costs, max_k: int) -> list[int]:
    """Per sample, the length of its request's best static choice (0 = no
    speculation, or one K in 1..max_k), chosen in hindsight on the request's
    own samples."""
    by_request: dict[tuple, list[Sample]] = {}
    for sample in samples:
        by_request.setdefault(sample.request, []).append(sample)
    best = {request: max(range(max_k + 1), key=lambda k: outcome(
        mine, [k] * len(mine), costs)["tokens_per_second"])
        for request, mine in by_request.items()}
    return [best[sample.request] for sample in samples]


def cost_structures(cpu_costs: list[float] | None, cost_ratios: list[float]) -> list[Costs]:
    structures = []
    if cpu_costs is not None:
        structures.append(Costs("cpu (measured costs)", *cpu_costs))
    structures += [Costs(f"gpu-like, c={c:g}", 1.0, 0.0, 1.0 / c, 0.0) for c in cost_ratios]
    return structures
