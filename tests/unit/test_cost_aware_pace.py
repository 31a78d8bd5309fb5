"""The pace rule of the step plan (``planner``, "Pace"): a step drafts only
if every request that can draft expects at least the tokens per second the
step without drafting would give it."""

from __future__ import annotations

import itertools
import random

from policy_simulation import policy, trained_states

from vllm_gammatune.policies import BatchView
from vllm_gammatune.policies.cost_aware.acceptance_rates import expected_tokens
from vllm_gammatune.policies.cost_aware.planner import best_plan, predicted_step
from vllm_gammatune.policies.cost_aware.step_costs import StepCosts

#: a busy 2-core CPU at batch 8 (seconds): a step without drafting 0.18 s, a
#: draft pass about a third of it
BUSY_CPU = StepCosts(target_now=0.18, per_token=0.0015, first_pass=0.065,
                     later_pass=0.063, catch_up_base=0.02, catch_up_per_token=0.0007)


def plan(costs, rates, keep_pace, **kwargs):
    return best_plan(costs, rates, max_num_draft_tokens=kwargs.pop("cap", 8),
                     min_draft_gain=kwargs.pop("margin", 0.05), keep_pace=keep_pace,
                     **kwargs)


def keeps_pace(costs, rates, lengths, limits=()):
    """Every request that can draft expects at least the step's time over
    the step without drafting, in tokens."""
    _, seconds = predicted_step(costs, rates, lengths)
    need = seconds / costs.target_now
    return all(expected_tokens(rate, k) >= need - 1e-9
               for rate, k, limit in zip(rates, lengths, limits or [1] * len(rates))
               if limit > 0)


def test_a_request_that_would_lag_stops_the_batch_from_drafting():
    rates = [0.9] * 7 + [0.2]
    unpaced = plan(BUSY_CPU, rates, keep_pace=False)
    assert max(unpaced) > 0  # the batch's tokens per second say draft ...
    assert not keeps_pace(BUSY_CPU, rates, unpaced)  # ... and the last request lags
    assert plan(BUSY_CPU, rates, keep_pace=True) == [0] * 8
    # where every request accepts well, the batch drafts, each at pace
    good = [0.9] * 8
    paced = plan(BUSY_CPU, good, keep_pace=True)
    assert max(paced) > 0 and min(paced) > 0 and keeps_pace(BUSY_CPU, good, paced)


def test_a_request_its_drafter_offers_nothing_is_not_held_to_pace():
    rates = [0.9] * 7 + [0.2]
    limits = [8] * 7 + [0]
    paced = plan(BUSY_CPU, rates, keep_pace=True, draft_limits=limits)
    assert max(paced) > 0 and paced[7] == 0
    assert keeps_pace(BUSY_CPU, rates, paced, limits)


def test_a_request_waiting_for_a_catch_up_that_does_not_pay_stops_the_batch():
    rates = [0.9] * 8
    catch_up = [0] * 7 + [2_000]
    remaining = [40] * 8
    unpaced = plan(BUSY_CPU, rates, keep_pace=False, catch_up_tokens=catch_up,
                   remaining_tokens=remaining)
    assert max(unpaced) > 0 and unpaced[7] == 0
    assert plan(BUSY_CPU, rates, keep_pace=True, catch_up_tokens=catch_up,
                remaining_tokens=remaining) == [0] * 8


def test_the_others_wait_through_a_catch_up_whole():
    """A request's own catch-up is charged at its share (it serves its later
    drafts); another's is time it waits through. A busy batch of fresh
    prompts, each spread thin by a high drafting share, drafts without the
    rule and not with it; one short catch-up among requests that accept well
    is waited through."""
    rates = [0.95] * 8
    fresh = dict(catch_up_tokens=[250] * 8, remaining_tokens=[40] * 8, drafting_share=1.0)
    assert max(plan(BUSY_CPU, rates, keep_pace=False, **fresh)) > 0
    assert plan(BUSY_CPU, rates, keep_pace=True, **fresh) == [0] * 8
    good = [0.95] * 8
    one = dict(catch_up_tokens=[0] * 7 + [30], remaining_tokens=[40] * 8,
               drafting_share=1.0)
    paced = plan(BUSY_CPU, good, keep_pace=True, **one)
    assert min(paced) > 0


def test_paced_plans_keep_pace_and_find_a_paced_plan_where_one_pays():
    """Random small batches: a paced plan keeps pace; where brute force finds
    a plan that keeps pace and beats not drafting by the margin, the paced
    search (which only lengthens lagging drafts) almost always drafts too,
    within 10% of that plan's tokens per second; at batch 1 the rule changes
    nothing."""
    rng = random.Random(7)
    shortfalls, missed = [], 0
    for _ in range(1500):
        num_reqs, cap = rng.choice([1, 2, 3]), 4
        t = rng.uniform(0.02, 0.2)
        costs = StepCosts(t, rng.uniform(0, 0.2) * t / num_reqs, rng.uniform(0, 0.6) * t,
                          rng.uniform(0, 0.5) * t, 0.0, 0.0)
        rates = [rng.uniform(0.05, 0.97) for _ in range(num_reqs)]
        limits = [rng.choice([0, 2, cap]) for _ in range(num_reqs)]
        paced = plan(costs, rates, keep_pace=True, cap=cap, draft_limits=limits)
        if num_reqs == 1:
            assert paced == plan(costs, rates, keep_pace=False, cap=cap, draft_limits=limits)
        best_ratio, best = num_reqs / t * 1.05, None
        for lengths in itertools.product(*(range(limit + 1) for limit in limits)):
            tokens, seconds = predicted_step(costs, rates, lengths)
            if max(lengths) and keeps_pace(costs, rates, lengths, limits) and (
                    tokens / seconds > best_ratio):
                best_ratio, best = tokens / seconds, lengths
        if max(paced) > 0:
            assert keeps_pace(costs, rates, paced, limits)
        if best is not None and max(paced) == 0:
            missed += 1
        elif best is not None:
            tokens, seconds = predicted_step(costs, rates, paced)
            shortfalls.append(tokens / seconds / best_ratio)
    assert len(shortfalls) > 400 and missed < 0.01 * len(shortfalls)
    assert min(shortfalls) > 0.9


def test_the_policy_paces_by_default_and_can_be_told_not_to():
    p = policy()
    assert p.keep_pace
    states = trained_states(p, 2, drafted=4, accepted=4) + trained_states(
        p, 1, drafted=4, accepted=0)
    batch = BatchView(3, 3)
    assert p.plan_batch(states, batch) == [0, 0, 0]
    off = policy(keep_pace=False)
    states = trained_states(off, 2, drafted=4, accepted=4) + trained_states(
        off, 1, drafted=4, accepted=0)
    assert max(off.plan_batch(states, batch)) > 0


def test_probes_spread_a_catch_up_by_what_the_plans_at_the_batch_size_drafted():
    """The plans' own share at a batch size (catch-ups and pace included)
    falls where a long catch-up holds the batch back, while the share of the
    plans without catch-ups says the requests would draft; the probe
    ceiling reads the former."""
    p = policy()
    states = trained_states(p, 3, drafted=4, accepted=4)
    held = BatchView(3, 3, catch_up_tokens=(0, 0, 5_000), remaining_tokens=(256,) * 3)
    for _ in range(20):
        assert max(p.plan_batch(states, held)) <= 1  # nothing but probes
    shares = p.catch_up_shares
    assert shares.free_drafting.at(3) > 0.8 and shares.planned_drafting.at(3) == 0.0
    for _ in range(20):
        assert max(p.plan_batch(states, BatchView(3, 3))) > 0
    assert shares.planned_drafting.at(3) > 0.8
