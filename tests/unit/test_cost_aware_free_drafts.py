"""Free drafts ahead of the draft model (``cost_aware.free_drafts``): which
requests verify an n-gram's tokens, and how the cost-aware policy learns and
plans around them."""

from __future__ import annotations

import pytest

from vllm_gammatune.policies import (
    BatchView,
    CostAwarePolicy,
    DraftSource,
    FixedLinearCost,
    Verification,
)
from vllm_gammatune.policies.cost_aware.free_drafts import free_draft_lengths
from vllm_gammatune.policies.cost_aware.step_costs import StepCosts

#: a CPU-like step: a draft pass a third of the target's, a verified token 2%
COSTS = StepCosts(target_now=0.1, per_token=0.002, first_pass=0.033, later_pass=0.033,
                  catch_up_base=0.0, catch_up_per_token=0.0)


def test_a_good_free_draft_is_verified_whole_and_a_missing_one_is_not():
    assert free_draft_lengths(COSTS, [0.8, 0.8], [0.5, 0.5], [4, 0], 8) == [4, 0]


def test_the_free_draft_is_cut_where_its_next_token_stops_paying():
    # at one request lambda * per_token = 0.02: 0.5^5 = 0.031 pays, 0.5^6 does not
    assert free_draft_lengths(COSTS, [0.5], [0.01], [8], 8) == [5]
    # a verified token as dear as a step: even a sure-looking token does not pay
    dear = StepCosts(0.1, 0.1, 0.0, 0.0, 0.0, 0.0)
    assert free_draft_lengths(dear, [0.9], [0.01], [8], 8) == [0]


def test_the_draft_model_keeps_the_requests_where_its_draft_is_worth_more():
    # a draft model right 95% of the time against a lookup right 30%: the model
    assert free_draft_lengths(COSTS, [0.3], [0.95], [3], 8) == [0]
    # the same rates with free draft passes: still the model
    free_passes = StepCosts(0.1, 0.002, 0.0, 0.0, 0.0, 0.0)
    assert free_draft_lengths(free_passes, [0.3], [0.95], [3], 8) == [0]
    # a lookup as good as the model is preferred: it costs no draft pass
    assert free_draft_lengths(COSTS, [0.9], [0.9], [8], 8) == [8]


def test_a_request_the_model_would_not_draft_verifies_any_free_draft_that_pays():
    # the model right 95% of the time would win, but the step's plan leaves
    # the request at 0: its free draft has nothing to lose to
    assert free_draft_lengths(COSTS, [0.3], [0.95], [3], 8, model_drafts=[True]) == [0]
    assert free_draft_lengths(COSTS, [0.3], [0.95], [3], 8, model_drafts=[False]) == [3]
    # a free draft that does not pay on its own is not verified either way
    dear = StepCosts(0.1, 0.1, 0.0, 0.0, 0.0, 0.0)
    assert free_draft_lengths(dear, [0.9], [0.01], [8], 8, model_drafts=[False]) == [0]


def test_verified_tokens_cost_more_in_a_larger_batch():
    # alone a lookup right half the time is verified over 5 tokens; in a
    # batch of 8 each verified token costs 8 requests' rate, and 2 pay
    assert free_draft_lengths(COSTS, [0.5], [0.01], [8], 8) == [5]
    assert free_draft_lengths(COSTS, [0.5] * 8, [0.01] * 8, [8] * 8, 8) == [2] * 8


def test_the_cap_bounds_the_free_draft_and_an_unknown_step_drafts_none():
    assert free_draft_lengths(COSTS, [0.9], [0.1], [12], 6) == [6]
    unknown = StepCosts(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert free_draft_lengths(unknown, [0.9], [0.1], [4], 6) == [0]


def fixed_policy(**kwargs):
    return CostAwarePolicy(8, target_cost=FixedLinearCost(0.1, 0.002),
                           draft_cost=FixedLinearCost(0.033, 0.0), **kwargs)


def free_draft(num_draft_tokens, num_accepted_tokens):
    """A free draft's verification (an n-gram lookup's)."""
    return Verification("r", 0, num_draft_tokens, num_accepted_tokens,
                        source=DraftSource.FREE)


def test_the_policy_learns_free_drafts_apart_from_the_draft_models():
    policy = fixed_policy()
    state = policy.new_state()
    model_rate = policy.acceptance.rate(state.acceptance)
    for _ in range(6):
        policy.observe(state, free_draft(4, 4))
    assert policy.free_acceptance.rate(state.free_drafts) > 0.8
    assert policy.acceptance.rate(state.acceptance) == model_rate
    # a new request starts from the engine's free-draft rate
    assert policy.free_acceptance.rate(policy.new_state().free_drafts) > 0.5
    with pytest.raises(ValueError):
        policy.observe(state, free_draft(2, 3))


def test_the_policy_plans_free_drafts_then_the_model_for_the_others():
    policy = fixed_policy()
    states = [policy.new_state(), policy.new_state()]
    for _ in range(6):
        policy.observe(states[0], free_draft(4, 4))
        policy.observe(states[1], Verification("r", 0, 4, 4, num_reqs=2))
    batch = BatchView(num_reqs=2, num_scheduled_tokens=2)
    free = policy.free_draft_lengths(states, [8, 0], batch)
    assert free == [8, 0]
    # the model's plan sees a limit of 0 where the free draft is verified
    batch = BatchView(num_reqs=2, num_scheduled_tokens=2, draft_limits=(0, 8),
                      free_draft_tokens=tuple(free))
    plan = policy.plan_batch(states, batch)
    assert plan[0] == 0 and plan[1] > 0


def test_a_policy_whose_costs_are_not_measured_yet_leaves_every_request_to_the_model():
    policy = CostAwarePolicy(8)
    states = [policy.new_state()]
    assert policy.free_draft_lengths(states, [5], BatchView(num_reqs=1)) == [0]


@pytest.mark.parametrize("keep_pace", [True, False])
def test_a_free_draft_is_weighed_against_the_model_only_where_the_plan_drafts(keep_pace):
    """A request the draft model accepts well and a request it does not: the
    batch's plan drafts both (their tokens per second, together), or under
    the pace rule neither (the second would fall behind a step without
    drafting). Where the model would draft, its draft beats the first
    request's lookup; where it would not, the lookup is verified."""
    policy = fixed_policy(keep_pace=keep_pace)
    states = [policy.new_state(), policy.new_state()]
    for _ in range(6):
        policy.observe(states[0], Verification("r", 0, 4, 4, num_reqs=2))
        policy.observe(states[0], free_draft(4, 1))
        policy.observe(states[1], Verification("r", 0, 4, 0, num_reqs=2))
    batch = BatchView(num_reqs=2, num_scheduled_tokens=2)
    model_plan = policy.rules.best(policy.costs.at(2, 2),
                                   policy.acceptance.rates([s.acceptance for s in states]),
                                   batch, 1.0)
    assert (max(model_plan) == 0) == keep_pace
    assert policy.free_draft_lengths(states, [4, 0], batch) == ([4, 0] if keep_pace
                                                                else [0, 0])
