"""The cost-aware policy (``cost_aware.policy``): the order of a step's plan,
what it records, and its parts working together."""

from __future__ import annotations

import pytest
from policy_simulation import GPU_DRAFT, GPU_TARGET, plan_of, policy, trained_states

from vllm_gammatune.policies import (
    BatchView,
    CostAwarePolicy,
    DraftPassTiming,
    FixedLinearCost,
    TargetStepTiming,
)
from vllm_gammatune.policies.cost_aware.decision import DraftingShare, PlannedStep


def test_warms_up_by_drafting_until_costs_are_measured():
    p = CostAwarePolicy(8, warmup_num_draft_tokens=2)
    states = [p.new_state() for _ in range(3)]
    assert p.plan_batch(states, BatchView(3, 3)) == [2, 2, 2]
    for n in (3, 9, 3, 9):
        p.observe_costs([TargetStepTiming(n, 0.1 + 0.01 * n),
                         DraftPassTiming(n, 0.03 + 0.001 * n)])
    assert p.costs.target.ready and p.costs.draft.ready


def test_last_decision_says_what_each_step_chose():
    p = policy(probe_interval=4, max_probe_interval=16, probe_budget=1.0)
    state = trained_states(p, 1, drafted=4, accepted=0)[0]
    kinds = []
    for _ in range(4):
        plan = p.plan_batch([state], BatchView(1, 1, catch_up_tokens=(7,)))
        decision = p.last_decision
        kinds.append(decision.kind)
        assert decision.num_draft_tokens == sum(plan) and decision.batch_size == 1
        assert decision.catch_up_tokens == (7 if max(plan) else 0)
    assert kinds == ["skip", "skip", "skip", "probe"]
    good = trained_states(p, 1, drafted=4, accepted=4)[0]
    fast = policy(target=GPU_TARGET, draft=GPU_DRAFT)
    assert max(fast.plan_batch([good], BatchView(1, 1))) > 0
    assert fast.last_decision.kind == "draft"
    assert fast.last_decision.predicted_seconds > 0


def test_a_catch_up_is_spread_whenever_drafting_pays_without_it():
    """A request whose drafting pays on its own catches up and drafts even
    after a long stretch where the engine drafted nothing (an engine-wide
    share of drafted steps would charge it whole and lock drafting out for
    good); where drafting does not pay even without the catch-up, the step
    skips. Without the pace rule, under which the other requests wait through
    the catch-up whole (``test_cost_aware_pace``)."""
    # a 50 ms target step; a 300-token catch-up costs 65 ms, ~1 ms per step
    # when spread over the ~64 steps a request with rate 0.75 has left
    p = policy(target=FixedLinearCost(0.05, 0.0005), draft=FixedLinearCost(0.005, 0.0002),
               keep_pace=False)
    good = trained_states(p, 3, drafted=4, accepted=3)
    lagging = BatchView(3, 3, catch_up_tokens=(0, 0, 300), remaining_tokens=(256,) * 3)
    assert min(plan_of(p, good, lagging)) > 0  # spread over ~64 drafted steps
    bad = trained_states(p, 3, drafted=4, accepted=0)
    for _ in range(200):
        p.plan_batch(bad, BatchView(3, 3))  # nothing pays: skips (and probes)
    assert p.drafting.share < 0.05
    assert min(plan_of(p, good, lagging)) > 0  # still: it drafts after catching up
    # all of the catch-up now (2 tokens left): the lagging request waits
    short = BatchView(3, 3, catch_up_tokens=(0, 0, 300), remaining_tokens=(256, 256, 2))
    plan = plan_of(p, good, short)
    assert min(plan[:2]) > 0 and plan[2] == 0
    assert plan_of(p, bad, lagging) == [0, 0, 0]


def test_a_planned_step_becomes_the_decision_the_trace_writes():
    planned = PlannedStep("probe", [1, 0, 3], [True, False, False],
                          BatchView(3, 9, catch_up_tokens=(5, 7, 0), has_prefill=False),
                          4.5, 0.2)
    decision = planned.decision(catch_up_seconds_per_token=0.002, drafting_share=0.5,
                                previous_cycle_seconds=0.3, step_costs=(0.1, 0.0, 0.05, 0.0))
    assert (decision.batch_size, decision.num_scheduled_tokens) == (3, 9)
    assert (decision.num_draft_tokens, decision.max_num_draft_tokens) == (4, 3)
    assert decision.num_probes == 1 and decision.catch_up_tokens == 5  # drafting ones
    assert decision.previous_cycle_seconds == 0.3
    assert decision.kind == "probe" and decision.step_costs == (0.1, 0.0, 0.05, 0.0)


def test_the_drafting_share_decays_toward_the_recent_steps():
    share = DraftingShare()
    assert share.share == 1.0
    share.count([0, 0])
    assert share.share == pytest.approx(0.98)
    for _ in range(300):
        share.count([0, 2])
    assert share.share > 0.99


def test_a_skipped_step_is_padded_to_the_graph_shape_only_on_gpu_like_costs():
    """``pads_skipped_step``: at small batch a GPU's verification is next to
    free (pad, keep the FULL graph); the CPU's is not; nor at a batch where
    the GPU's per-token cost adds up; nor before the costs are measured."""
    gpu = policy(GPU_TARGET, GPU_DRAFT)
    assert gpu.pads_skipped_step(num_reqs=4, num_draft_tokens=4)
    assert not gpu.pads_skipped_step(num_reqs=256, num_draft_tokens=8)
    assert not policy().pads_skipped_step(num_reqs=4, num_draft_tokens=4)
    assert not CostAwarePolicy(8).pads_skipped_step(num_reqs=4, num_draft_tokens=4)
