"""gammatune_tools.bench.token_projection: projected tokens per second of draft strategies."""

from __future__ import annotations

import random

import pytest

from gammatune_tools.bench import token_projection
from gammatune_tools.bench.token_projection import Costs, Sample
from gammatune_tools.bench.traces import Verification


def test_projection_samples_need_max_k_drafted_tokens_with_probs():
    verifications = [
        Verification(("a",), 3, 3, [0.9, 0.8, 0.7], None),  # accepted capped at 2
        Verification(("a",), 1, 0, [0.4], None),  # too short: censored
        Verification(("a",), 2, 1, None, None),  # no token_probs
    ]
    samples = token_projection.projection_samples(verifications, max_k=2)
    assert samples == [Sample(("a",), 2, [0.9, 0.8])]


def test_fixed_k_oracle_and_no_speculation_match_hand_computation():
    costs = Costs("cpu", T0=1.0, T1=0.5, D0=0.2, D1=0.1)
    samples = [Sample(("a",), a, [0.5, 0.5]) for a in (0, 2, 1)]
    n = len(samples)

    def tok_s(lengths):
        return token_projection.outcome(samples, lengths, costs)["tokens_per_second"]

    # step(k) = 1 + 0.5 * (1 + k) + 0.3 * k: 1.5, 2.3, 3.1
    assert tok_s([0] * n) == pytest.approx(3 / 4.5)
    assert tok_s([1] * n) == pytest.approx((1 + 2 + 2) / (3 * 2.3))
    assert tok_s([2] * n) == pytest.approx((1 + 3 + 2) / (3 * 3.1))
    assert tok_s([0, 2, 1]) == pytest.approx((1 + 3 + 2) / (1.5 + 3.1 + 2.3))
    two = token_projection.outcome(samples, [2] * n, costs)
    assert two["tokens_per_target_pass"] == pytest.approx(2.0)
    assert two["draft_passes_per_token"] == pytest.approx(6 / 6)
    assert two["mean_draft_length"] == pytest.approx(2.0)

    result = token_projection.project(samples, costs, max_k=2)
    rows = {s["strategy"]: s for s in result["strategies"]}
    assert rows["no speculation"]["relative"] == pytest.approx(1.0)
    assert rows["fixed K=1"]["relative"] == pytest.approx((5 / 6.9) / (3 / 4.5))
    assert rows["per-token oracle"]["tokens_per_second"] == pytest.approx(6 / 6.9)
    assert result["best_fixed_k"] == 1  # 5 / 6.9 > 6 / 9.3
    assert result["oracle_vs_best_fixed"] == pytest.approx((6 / 6.9) / (5 / 6.9))
    rule = rows["rule (gammatune_cost)"]["tokens_per_second"]
    assert result["rule_share_of_oracle_gain"] == pytest.approx(
        (rule - 5 / 6.9) / (6 / 6.9 - 5 / 6.9))


def random_samples(num: int, max_k: int, seed: int = 0) -> list[Sample]:
    rng = random.Random(seed)
    samples = []
    for j in range(num):
        probs = [rng.uniform(0.05, 0.99) for _ in range(max_k)]
        accepted = 0
        while accepted < max_k and rng.random() < probs[accepted]:
            accepted += 1
        samples.append(Sample((0, str(j % 4), 0), accepted, probs))
    return samples


@pytest.mark.parametrize("c", [3.0, 10.0, 20.0])
def test_per_token_oracle_beats_every_fixed_k_on_gpu_like_costs(c):
    max_k = 6
    samples = random_samples(300, max_k)
    (costs,) = token_projection.cost_structures(None, [c])
    result = token_projection.project(samples, costs, max_k)
    rows = {s["strategy"]: s["tokens_per_second"] for s in result["strategies"]}
    for K in range(1, max_k + 1):
        assert rows["per-token oracle"] >= rows[f"fixed K={K}"]
    assert result["oracle_vs_best_fixed"] >= 1.0
    assert result["rule_share_of_oracle_gain"] <= 1.0  # the oracle knows more


def test_per_request_oracle_takes_each_requests_best_static_choice():
    """One request the draft always gets right, one it never does: the
    oracle drafts the cap for the first and nothing for the second, and is
    at least as fast as any one choice for both."""
    max_k = 4
    costs = Costs("cpu-like", 1.0, 0.0, 0.3, 0.0)
    easy = [Sample(("easy",), max_k, [0.99] * max_k) for _ in range(10)]
    hard = [Sample(("hard",), 0, [0.2] * max_k) for _ in range(10)]
    lengths = token_projection.per_request_best(easy + hard, costs, max_k)
    assert lengths == [max_k] * 10 + [0] * 10
    oracle = token_projection.outcome(easy + hard, lengths, costs)["tokens_per_second"]
    for k in range(max_k + 1):
        static = token_projection.outcome(easy + hard, [k] * 20, costs)["tokens_per_second"]
        assert oracle >= static


def test_rule_lengths_stay_within_cap_and_follow_acceptance():
    max_k = 5
    costs = Costs("gpu-like", 1.0, 0.0, 0.1, 0.0)
    confident = [Sample(("a",), max_k, [0.97] * max_k) for _ in range(40)]
    hopeless = [Sample(("b",), 0, [0.1] * max_k) for _ in range(40)]
    mixed = random_samples(200, max_k, seed=1)
    for samples in (confident, hopeless, mixed):
        lengths, passes = token_projection.rule_lengths(samples, costs, rate=2.0, max_k=max_k)
        assert len(lengths) == len(passes) == len(samples)
        assert all(0 <= k <= max_k and k <= run <= k + 1 for k, run in zip(lengths, passes))
    long, _ = token_projection.rule_lengths(confident, costs, rate=2.0, max_k=max_k)
    short, _ = token_projection.rule_lengths(hopeless, costs, rate=2.0, max_k=max_k)
    assert sum(long) > sum(short)

    lengths, passes, rates = token_projection.rule_fixed_point(mixed, costs, 2.0, max_k)
    assert len(rates) == token_projection.RATE_ITERATIONS + 1 and rates[0] == 2.0
    assert rates[-1] == pytest.approx(
        token_projection.outcome(mixed, lengths, costs, passes)["tokens_per_second"])
    # a token drafted and left unverified costs its pass
    dropped = token_projection.outcome(mixed[:1], [0], costs, [1])
    assert dropped["tokens_per_second"] < token_projection.outcome(mixed[:1], [0], costs)[
        "tokens_per_second"]
