"""The plan of a step (``cost_aware.planner``) and the acceptance rates it
plans with (``cost_aware.acceptance_rates``), against brute force and
synthetic sequences."""

from __future__ import annotations

import itertools
import random

import pytest
from policy_simulation import (
    CPU_DRAFT,
    CPU_TARGET,
    GPU_DRAFT,
    GPU_TARGET,
    measured_cpu_policy,
    plan_of,
    policy,
    trained_states,
)

from vllm_gammatune.policies import BatchView, DrafterTraits, FixedLinearCost
from vllm_gammatune.policies.cost_aware.acceptance_rates import expected_tokens
from vllm_gammatune.policies.cost_aware.catch_ups import catch_up_share
from vllm_gammatune.policies.cost_aware.planner import best_plan


def brute_force_best(p, states, batch):
    """The best plan by enumeration (tiny batches only)."""
    rates = [p.acceptance.rate(s.acceptance) for s in states]
    t_base, t_slope = p.costs.target.coefficients()
    d_base, d_slope = p.costs.draft.coefficients()
    n = len(states)
    best, best_ratio = None, -1.0
    for plan in itertools.product(range(p.max_num_draft_tokens + 1), repeat=n):
        value = sum(expected_tokens(a, k) for a, k in zip(rates, plan))
        cost = t_base + t_slope * (n + sum(plan))
        if max(plan) > 0:
            cost += d_base + d_slope * (batch.num_scheduled_tokens + n)
            cost += (max(plan) - 1) * (d_base + d_slope * n)
            cost += sum(d_slope * plan[i] for i in range(n))
        if value / cost > best_ratio + 1e-12:
            best, best_ratio = list(plan), value / cost
    return best, best_ratio


def ratio_of(p, states, batch, plan):
    rates = [p.acceptance.rate(s.acceptance) for s in states]
    t_base, t_slope = p.costs.target.coefficients()
    d_base, d_slope = p.costs.draft.coefficients()
    n = len(states)
    value = sum(expected_tokens(a, k) for a, k in zip(rates, plan))
    cost = t_base + t_slope * (n + sum(plan))
    if max(plan) > 0:
        cost += (d_base + d_slope * (batch.num_scheduled_tokens + n)
                 + (max(plan) - 1) * (d_base + d_slope * n) + d_slope * sum(plan))
    return value / cost


def test_expected_tokens_is_the_geometric_model():
    assert expected_tokens(0.5, 0) == 1.0
    assert expected_tokens(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert expected_tokens(0.8, 5) == pytest.approx((1 - 0.8 ** 6) / 0.2)


def test_acceptance_rate_follows_the_requests_own_counts():
    p = policy()
    good = trained_states(p, 1, drafted=4, accepted=4)[0]
    bad = trained_states(p, 1, drafted=4, accepted=0)[0]
    assert p.acceptance.rate(good.acceptance) > 0.9
    assert p.acceptance.rate(bad.acceptance) < 0.2
    # truncated geometric MLE: 3 accepted then a rejection, every time -> 0.75
    mid = trained_states(p, 1, drafted=6, accepted=3)[0]
    assert p.acceptance.rate(mid.acceptance) == pytest.approx(0.75, abs=0.06)


def test_chooses_zero_when_drafting_cannot_pay():
    p = policy()
    states = trained_states(p, 16, drafted=4, accepted=1)
    assert p.plan_batch(states, BatchView(16, 16)) == [0] * 16
    # and even a perfect draft does not pay when a draft pass costs a target step
    p = policy(draft=FixedLinearCost(0.2, 0.0))
    states = trained_states(p, 4, drafted=4, accepted=4)
    assert plan_of(p, states, BatchView(4, 4)) == [0] * 4


def test_grows_when_drafting_pays():
    p = policy(target=GPU_TARGET, draft=GPU_DRAFT)
    weak = trained_states(p, 1, drafted=4, accepted=1)
    strong = trained_states(p, 1, drafted=4, accepted=4)
    k_weak = plan_of(p, weak, BatchView(1, 1))[0]
    k_strong = plan_of(p, strong, BatchView(1, 1))[0]
    assert 1 <= k_weak < k_strong == p.max_num_draft_tokens


def test_shrinks_as_the_batch_grows_on_cpu_costs():
    p = policy()
    lengths = []
    for batch_size in (1, 4, 16):
        states = trained_states(p, batch_size, drafted=4, accepted=3)
        lengths.append(max(plan_of(p, states, BatchView(batch_size, batch_size))))
    assert lengths[0] > 0
    assert lengths == sorted(lengths, reverse=True)
    assert lengths[-1] == 0


@pytest.mark.parametrize("seed", range(6))
def test_joint_plan_matches_brute_force(seed):
    rng = random.Random(seed)
    target = FixedLinearCost(rng.uniform(0.01, 0.2), rng.uniform(0.0, 0.03))
    draft = FixedLinearCost(rng.uniform(0.0, 0.08), rng.uniform(0.0, 0.004))
    p = policy(target, draft, cap=4, keep_pace=False)  # the ratio alone
    states = []
    for _ in range(3):
        accepted = rng.randint(0, 4)
        states += trained_states(p, 1, drafted=4, accepted=accepted)
    batch = BatchView(3, 3 + rng.randint(0, 6))
    want, want_ratio = brute_force_best(p, states, batch)
    got = plan_of(p, states, batch)
    assert ratio_of(p, states, batch, got) == pytest.approx(want_ratio, rel=1e-6), (got, want)


def test_drafts_only_on_a_predicted_gain_above_the_margin():
    """A step drafts for its own sake only if the model predicts at least
    min_draft_gain more tokens per second than not drafting."""
    below = above = 0
    for num_reqs in (1, 2, 4):
        for accepted in range(9):
            plain = policy(min_draft_gain=0.0)
            states = trained_states(plain, num_reqs, drafted=8, accepted=accepted)
            batch = BatchView(num_reqs, num_reqs)
            best = plan_of(plain, states, batch)
            gain = (ratio_of(plain, states, batch, best)
                    / ratio_of(plain, states, batch, [0] * num_reqs) - 1.0)
            margined = policy(min_draft_gain=0.05)
            margined_states = trained_states(margined, num_reqs, drafted=8, accepted=accepted)
            plan = plan_of(margined, margined_states, batch)
            if max(best) > 0 and gain < 0.05:
                below += 1
                assert plan == [0] * num_reqs, (num_reqs, accepted, gain)
            elif max(best) > 0:
                above += 1
                assert plan == best, (num_reqs, accepted, gain)
    assert below and above  # both sides of the margin were exercised


def test_catch_up_cost_makes_a_lagging_request_wait():
    # the catch-up's price alone: a request that waits does not stop the
    # others (the pace rule would: test_cost_aware_pace)
    p = policy(target=GPU_TARGET, draft=FixedLinearCost(0.004, 0.001), keep_pace=False)
    states = trained_states(p, 2, drafted=4, accepted=4)
    fresh = plan_of(p, states, BatchView(2, 2, catch_up_tokens=(0, 0)))
    lagging = plan_of(p, states, BatchView(2, 2, catch_up_tokens=(0, 500)))
    assert fresh[1] > 0 and lagging[1] == 0 and lagging[0] > 0


def test_catch_up_is_spread_over_the_requests_remaining_tokens():
    # the catch-up's price alone: a request that waits does not stop the
    # others (the pace rule would: test_cost_aware_pace)
    p = policy(target=GPU_TARGET, draft=FixedLinearCost(0.004, 0.001), keep_pace=False)
    states = trained_states(p, 2, drafted=4, accepted=3)  # rate 0.75
    # 256 tokens left at most 4 a step: 64 steps, a 64th of the catch-up now
    assert catch_up_share(0.75, 256, 8) == pytest.approx(1 / 64)
    assert catch_up_share(0.75, 10_000, 8) == catch_up_share(0.75, 256, 8)  # the horizon
    assert catch_up_share(0.75, 2, 8) == 1.0 == catch_up_share(0.75, None, 8)
    # a drafted step emits at most the cap + 1 tokens, whatever the rate
    assert catch_up_share(0.99, 48, 5) == pytest.approx(1 / 8)

    def plan(remaining):
        return plan_of(p, states, BatchView(2, 2, catch_up_tokens=(0, 100),
                                             remaining_tokens=remaining))

    assert max(plan_of(p, states, BatchView(2, 2))) > 0  # drafting pays, no catch-up
    assert plan(())[1] == 0 and plan((2, 2))[1] == 0  # all of it now: waits
    assert plan((256, 256))[1] > 0  # a long way to go: catches up and drafts


def test_catch_up_is_spread_over_the_steps_that_will_draft():
    """``f``: where requests at this batch size draft on a share ``f`` of
    their steps, a catch-up is spread over ``f R / (f E + 1 - f)`` steps."""
    # 48 tokens at rate 0.7 (at most 1/0.3 a step): 14.4 steps drafting
    # every step; 9 drafting a third of the steps, 2.1 a twentieth
    assert catch_up_share(0.7, 48, 8) == pytest.approx(1 / (48 * 0.3))
    assert catch_up_share(0.7, 48, 8, 1 / 3) == pytest.approx((1 / 0.3 / 3 + 2 / 3) / 16)
    assert catch_up_share(0.7, 48, 8, 0.05) == pytest.approx(
        (0.05 / 0.3 + 0.95) / (0.05 * 48))
    assert catch_up_share(0.7, 48, 8, 0.0) == 1.0
    # in the plan: a catch-up that pays over a request's every remaining
    # step waits where few of them will draft
    p = policy(target=GPU_TARGET, draft=FixedLinearCost(0.004, 0.001))
    states = trained_states(p, 2, drafted=4, accepted=3)
    batch = BatchView(2, 2, catch_up_tokens=(0, 100), remaining_tokens=(256, 256))
    rates = [p.acceptance.rate(s.acceptance) for s in states]
    costs = p.costs.at(2, 2)

    def plan(share):
        return best_plan(costs, rates, batch.catch_up_tokens, batch.remaining_tokens,
                         max_num_draft_tokens=8, min_draft_gain=0.05,
                         drafting_share=share)

    assert plan(1.0)[1] > 0 and plan(0.01)[1] == 0


def test_the_share_of_steps_that_draft_is_learnt_per_batch_size_without_catch_ups():
    """``f`` falls at a batch size where the plans without catch-ups skip,
    not at another, and not where only the catch-up makes a request wait
    (without the pace rule, under which the waiting request stops the step's
    drafting: ``test_pace``)."""
    p = policy(target=GPU_TARGET, draft=FixedLinearCost(0.004, 0.001), keep_pace=False)
    good = trained_states(p, 2, drafted=4, accepted=4)
    assert p.catch_up_shares.free_drafting.at(2) == 0.0  # nothing seen at batch 2 yet
    for _ in range(10):  # a catch-up too large to pay: the request waits
        plan = p.plan_batch(good, BatchView(2, 2, catch_up_tokens=(0, 100_000),
                                            remaining_tokens=(256, 256)))
        assert plan[0] > 0 and plan[1] == 0
    # every plan without catch-ups drafted both requests, the waiting one too
    assert p.catch_up_shares.free_drafting.at(2) == pytest.approx(1 - 0.9 ** 10)
    bad = trained_states(p, 3, drafted=4, accepted=0)
    for _ in range(10):
        p.plan_batch(bad, BatchView(3, 3))
        assert p.last_decision.kind != "draft"
    assert p.catch_up_shares.free_drafting.at(3) == 0.0
    assert p.catch_up_shares.free_drafting.at(2) == pytest.approx(1 - 0.9 ** 10)


def test_each_request_drafts_at_most_what_its_drafter_offers():
    """With per-request limits (an n-gram drafter's match lengths), the plan
    is the best plan under them: brute force over the limited lengths, a
    request offered nothing drafts nothing, and with draft passes that cost
    nothing a request with a good rate takes its whole offer."""
    free = FixedLinearCost(0.0, 0.0)
    p = policy(target=FixedLinearCost(0.1, 0.002), draft=free, cap=6)
    states = trained_states(p, 3, drafted=4, accepted=4)
    limits = (2, 0, 5)
    batch = BatchView(3, 3, draft_limits=limits)
    plan = p.plan_batch(states, batch)
    assert plan[1] == 0 and plan[0] <= 2 and plan[2] <= 5
    rates = [p.acceptance.rate(s.acceptance) for s in states]
    best = max((candidate for candidate in itertools.product(
        *(range(limit + 1) for limit in limits))),
        key=lambda candidate: ratio_of(p, states, batch, list(candidate)))
    assert ratio_of(p, states, batch, plan) == pytest.approx(
        ratio_of(p, states, batch, list(best)))
    assert plan == [2, 0, 5] and all(rate > 0.9 for rate in rates)
    # nothing offered to anyone: nothing drafts, and no probe is asked for
    p = policy(target=FixedLinearCost(0.1, 0.002), draft=free, cap=6, probe_interval=1)
    states = [p.new_state() for _ in range(3)]
    assert all(p.plan_batch(states, BatchView(3, 3, draft_limits=(0, 0, 0))) == [0] * 3
               for _ in range(5))


def test_a_drafter_without_draft_kv_prices_no_catch_up():
    """``adapt_to_drafter(DrafterTraits(keeps_draft_kv=False))``: a prompt step plans
    without first drafting a chunk to price a catch-up (which a drafter with
    a draft KV cache does while no catch-up was timed), and its catch-up
    line costs nothing."""
    def first_prompt_step_kind(keeps_draft_kv: bool) -> str:
        p = measured_cpu_policy(prompt_pass=False)
        p.adapt_to_drafter(DrafterTraits(runs_every_planned_pass=False,
                                         keeps_draft_kv=keeps_draft_kv))
        states = trained_states(p, 4, drafted=4, accepted=4)
        p.plan_batch(states, BatchView(4, 300, has_prefill=True))
        return p.last_decision.kind

    assert first_prompt_step_kind(True) == "price"
    assert first_prompt_step_kind(False) != "price"
    p = measured_cpu_policy(prompt_pass=False)
    p.adapt_to_drafter(DrafterTraits(runs_every_planned_pass=False, keeps_draft_kv=False))
    assert p.costs.catch_up_line(4) == (0.0, 0.0)


def test_padding_a_skipped_step_is_free_only_where_verification_is():
    """A GPU at small batch verifies K more positions per request for next
    to nothing; the CPU's verification grows with every token."""
    from vllm_gammatune.policies.cost_aware.planner import PADDING_SHARE, padding_is_free

    assert padding_is_free(0.010, 0.0, num_reqs=8, num_draft_tokens=4)
    assert padding_is_free(0.010, 1e-6, num_reqs=8, num_draft_tokens=4)
    assert not padding_is_free(0.05, 0.004, num_reqs=4, num_draft_tokens=8)  # the CPU
    # the share, at its edge: 4 requests x 4 tokens x slope = share x step
    slope = PADDING_SHARE * 0.010 / (16 - PADDING_SHARE * 4)
    assert padding_is_free(0.010, slope * 0.999, 4, 4)
    assert not padding_is_free(0.010, slope * 1.001, 4, 4)
