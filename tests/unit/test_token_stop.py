"""gammatune_cost's per-token stop: the acceptance calibration and the rule."""

from __future__ import annotations

import random

import pytest
import torch

from vllm_gammatune.drafter.draft_step import DraftStep
from vllm_gammatune.policies import (
    BatchView,
    CostAwarePolicy,
    CycleTimings,
    CycleWallTime,
    DrafterTraits,
    DraftPassTiming,
    FixedLinearCost,
    PassesRun,
    StepObservation,
    TargetStepTiming,
    TokenRule,
    Verification,
)
from vllm_gammatune.policies.cost_aware.token_acceptance import (
    TokenAcceptanceModel,
    logit,
)
from vllm_gammatune.policies.cost_aware.request_state import CostAwareState
from vllm_gammatune.policies.cost_aware.token_stop import TokenPrices, TokenStop, rule_draft

CPU_TARGET = FixedLinearCost(0.10, 0.01)
CPU_DRAFT = FixedLinearCost(0.03, 0.001)


def test_cold_start_takes_the_drafts_probability_at_its_word():
    model = TokenAcceptanceModel()
    for q in (0.05, 0.5, 0.93):
        assert model.predict(logit(q), 1) == pytest.approx(q, rel=1e-6)


def test_calibration_learns_an_overconfident_draft():
    """Acceptance is q**2 (the draft flatters itself): after a few thousand
    labels the estimate at q = 0.8 is near 0.64, not 0.8."""
    rng = random.Random(0)
    model = TokenAcceptanceModel()
    bias = 0.0
    for _ in range(3000):
        qs = [rng.uniform(0.3, 1.0) for _ in range(4)]
        accepted = 0
        while accepted < 4 and rng.random() < qs[accepted] ** 2:
            accepted += 1
        bias = model.learn([logit(q) for q in qs], accepted, bias)
    assert model.predict(logit(0.8), 2, bias) == pytest.approx(0.64, abs=0.07)
    # the reliability data: in every well-filled bin, prediction ~ observation
    # over the second half (the first labels were predicted cold)
    assert all(abs(predicted - observed) < 0.15
               for _, predicted, observed, n in model.calibration() if n > 500)


def test_labels_stop_at_the_first_rejection():
    model = TokenAcceptanceModel()
    model.learn([0.0] * 5, 2, 0.0)  # accepted, accepted, rejected, unseen, unseen
    assert model.num_labels == 3
    model.learn([0.0] * 3, 3, 0.0)  # all accepted: three labels
    assert model.num_labels == 6
    model.learn([], 0, 0.0)
    assert model.num_labels == 6


def prices(rate=8.0):
    return TokenPrices(rate=rate, per_token=0.011, per_pass=0.031)


def test_rule_drafts_on_while_confident_and_stops_at_a_doubtful_token():
    model = TokenAcceptanceModel()
    sure = [logit(0.99)] * 8
    assert rule_draft(sure, model, prices(), cap=8) == (8, 8)
    # a token at 0.3 leaves survival below what its verification costs
    # (8 tok/s x 11 ms = 0.088 < 0.99^2 x 0.3): kept, but the next does not pay
    assert rule_draft([logit(0.99), logit(0.99), logit(0.3), logit(0.99)], model,
                      prices(), cap=8) == (3, 3)
    # where nothing is worth its cost, the first drafted token is left unverified
    assert rule_draft([logit(0.05)], model, prices(rate=20.0), cap=8) == (0, 1)


def test_rule_at_batch_greater_than_one_shares_the_pass():
    """Two requests whose next tokens each gain less than a pass costs but
    together more: the pass runs for both; a request that alone cannot pay
    for its verification stops."""
    stop = TokenStop()
    states = [CostAwareState() for _ in range(3)]
    step_prices = TokenPrices(rate=10.0, per_token=0.01, per_pass=0.06)
    stop.begin_draft(states, 0, step_prices, [True] * 3)
    assert all(state.token_rule.draft.ruled for state in states)
    # gain of each: S * alpha_next - R * c_token = 0.6 * 0.6 - 0.1 = 0.26 > 0,
    # alone below R * c_pass = 0.6, together 0.52 still below: all stop at 1
    assert stop.draft_on(states[:2], 1, [0.6, 0.6], [True, True]) == [1, 1]
    stop.begin_draft(states, 1, step_prices, [True] * 3)
    # three at 0.75: each gains 0.4625, together 1.39 > 0.6: every one goes on
    assert stop.draft_on(states, 1, [0.75] * 3, [True] * 3) == [None] * 3
    # a request that did not draft in the pass is left alone; the first,
    # alone now (0.75^3 - 0.1 = 0.32 < 0.6), cannot pay for a pass
    assert stop.draft_on(states, 2, [0.75, 0.01, 0.75], [True, True, False]) == [
        2, 1, None]


def test_a_ruled_draft_keeps_its_estimates_and_learns_from_its_verification():
    """The rule marks the drafts it governs, keeps each token's estimate as
    it was predicted (the trace's ``predicted_acceptance``) and labels them
    when the verification arrives."""
    stop = TokenStop()
    ruled, unruled = CostAwareState(), CostAwareState()
    stop.begin_draft([ruled, unruled], 0, prices(), [True, False])
    assert ruled.token_rule.draft.ruled and not unruled.token_rule.draft.ruled
    stop.draft_on([ruled, unruled], 1, [0.9, 0.9], [True, True])
    stop.draft_on([ruled, unruled], 2, [0.8, 0.8], [True, True])
    stop.draft_on([ruled, unruled], 3, [0.7, 0.7], [True, True])
    assert ruled.token_rule.draft.predicted == pytest.approx([0.9, 0.8, 0.7])  # alpha = q
    assert stop.verification_details(ruled.token_rule, 0, 2) == {
        "predicted_acceptance": [0.9, 0.8]}
    # learned, the request's offset moves; the rule is gone without prices
    stop.learn(ruled.token_rule, 0, 3, 1)
    assert ruled.token_rule.bias != 0.0 and stop.model.num_labels == 2
    stop.begin_draft([ruled], 1)
    assert not ruled.token_rule.draft.ruled


def _simulate_batch1(make_policy, steps: int, seed: int) -> tuple[float, list[int]]:
    """Tokens per second of a batch-1 engine on the fixed costs above, which
    its clock charges exactly (every pass, step and cycle reported as the
    proposer does), where the text alternates between easy stretches (draft
    tokens at q ~ 0.95) and hard ones (q ~ 0.35), and a token is accepted
    with probability q; returns (tokens per second, drafted lengths)."""
    rng = random.Random(seed)
    p = make_policy()
    states = {"r": p.new_state()}
    t0, t1 = CPU_TARGET.coefficients()
    d0, d1 = CPU_DRAFT.coefficients()
    tokens = seconds = 0.0
    lengths, drafted, easy = [], 0, True
    for step_index in range(steps):
        state = states["r"]
        if rng.random() < 0.1:
            easy = not easy
        qs = [min(0.999, max(0.01, rng.gauss(0.95 if easy else 0.35, 0.05)))
              for _ in range(p.max_num_draft_tokens)]
        step = DraftStep(p.plan_batch([state], BatchView(1, 1 + drafted)),
                         torch.device("cpu"),
                         token_rule=(lambda pos, probs, active: p.draft_on(
                             [state], pos, probs, active)) if isinstance(p, TokenRule)
                         else None)
        drafting = []
        for position in range(1, step.num_passes + 1):
            drafting.append(DraftPassTiming(1, d0 + d1))
            if step.record(torch.zeros(1, dtype=torch.long), None, None,
                           torch.tensor([qs[position - 1]])):
                break
        if step.num_passes:
            drafting.append(PassesRun(len(step.token_ids)))
        k = step.lengths.tolist()[0]
        passes = len(step.token_ids)
        accepted = 0
        while accepted < k and rng.random() < qs[accepted]:
            accepted += 1
        target = t0 + t1 * (1 + k)
        # what the proposer hands over before the next plan
        p.observe_step(StepObservation(
            step_index + 1,
            (Verification("r", step_index, k, accepted),) if k else (),
            (CycleTimings(drafting=tuple(drafting),
                          target=(CycleWallTime(target + passes * (d0 + d1)),
                                  TargetStepTiming(1 + k, target))),)), states)
        tokens += accepted + 1
        seconds += target + passes * (d0 + d1)
        lengths.append(k)
        drafted = k
    return tokens / seconds, lengths


def test_the_rule_beats_every_fixed_length_where_difficulty_varies():
    """On text whose difficulty changes, drafting token by token while it
    pays beats the best fixed length in hindsight by more than 5%."""
    from vllm_gammatune.policies import FixedDraftPolicy

    rule, lengths = _simulate_batch1(
        lambda: CostAwarePolicy(8, target_cost=CPU_TARGET, draft_cost=CPU_DRAFT), 4000, seed=1)
    fixed = {k: _simulate_batch1(lambda k=k: FixedDraftPolicy(8, k), 4000, seed=1)[0]
             for k in range(1, 9)}
    best_k = max(fixed, key=fixed.get)
    assert rule > 1.05 * fixed[best_k], (rule, fixed)
    # it drafts long on easy stretches and briefly on hard ones
    assert max(lengths) == 8 and min(lengths) <= 1


def test_without_the_rule_the_plan_lengths_stand():
    p = CostAwarePolicy(8, target_cost=CPU_TARGET, draft_cost=CPU_DRAFT, token_stop=False)
    state = p.new_state()
    plan = p.plan_batch([state], BatchView(1, 1))
    assert 0 < plan[0] < 8  # the geometric plan, not the cap
    assert p.draft_on([state], 1, [0.01], [True]) == [None]


def test_a_verification_one_plan_late_is_matched_with_the_draft_it_verifies():
    """Where the drafter hands verifications over after the next plan (the
    CUDA hot path), the rule learns from the draft of the step the
    verification names, not from the one the new plan just started: the
    lag is data (``Verification.step``)."""
    p = CostAwarePolicy(8, target_cost=CPU_TARGET, draft_cost=CPU_DRAFT)
    states = {"r": p.new_state()}
    for _ in range(20):  # a request whose drafts are accepted: the step drafts
        p.observe(states["r"], Verification("r", 0, 4, 4))
    state = states["r"]
    # the plan of step 3 drafts 2 tokens (all its drafter offers), ruled
    p.observe_step(StepObservation(3), states)
    assert p.plan_batch([state], BatchView(1, 1, draft_limits=(2,))) == [2]
    assert state.token_rule.draft.ruled
    p.draft_on([state], 1, [0.9], [True])
    p.draft_on([state], 2, [0.8], [True])
    # the next plan (step 4) starts a draft before step 3's is verified
    p.observe_step(StepObservation(4), states)
    assert p.plan_batch([state], BatchView(1, 3, draft_limits=(4,))) == [4]
    p.draft_on([state], 1, [0.2], [True])
    verification = Verification("r", 3, 2, 2)
    late = StepObservation(5, (verification,))
    assert late.lag(verification) == 2
    assert p.verification_details(state, verification)["predicted_acceptance"] == [
        0.9, 0.8]
    p.observe_step(late, states)
    assert p.token_stop.model.num_labels == 2  # step 3's draft's two tokens


def test_a_verification_three_plans_late_still_finds_its_draft():
    """One more step of lag than the hot path's (async scheduling) needs no
    change: each request keeps its last few drafts by step."""
    p = CostAwarePolicy(8, target_cost=CPU_TARGET, draft_cost=CPU_DRAFT)
    states = {"r": p.new_state()}
    for _ in range(20):
        p.observe(states["r"], Verification("r", 0, 4, 4))
    state = states["r"]
    p.observe_step(StepObservation(3), states)
    assert p.plan_batch([state], BatchView(1, 1, draft_limits=(2,))) == [2]
    p.draft_on([state], 1, [0.9], [True])
    p.draft_on([state], 2, [0.8], [True])
    for step in (4, 5):  # two more plans before step 3's verification arrives
        p.observe_step(StepObservation(step), states)
        p.plan_batch([state], BatchView(1, 3, draft_limits=(4,)))
        p.draft_on([state], 1, [0.2], [True])
    verification = Verification("r", 3, 2, 2)
    assert StepObservation(6, (verification,)).lag(verification) == 3
    assert p.verification_details(state, verification)["predicted_acceptance"] == [
        0.9, 0.8]


def test_without_early_exit_a_ruled_draft_is_planned_at_the_plans_length():
    """A drafter that runs every planned pass pays for the cap if the plan
    asks for it: there a ruled draft gets the step plan's length."""
    def lengths(runs_every_planned_pass):
        policy = CostAwarePolicy(8, target_cost=CPU_TARGET, draft_cost=CPU_DRAFT)
        policy.adapt_to_drafter(DrafterTraits(runs_every_planned_pass=runs_every_planned_pass))
        state = policy.new_state()
        for _ in range(20):  # a request whose drafts are half accepted
            policy.observe(state, Verification("r", 0, 4, 2))
        return policy.plan_batch([state], BatchView(num_reqs=1, num_scheduled_tokens=1))

    assert lengths(False) == [8]
    planned = lengths(True)
    assert 0 < planned[0] < 8
