"""Probing and its budget (``cost_aware.probe_scheduler``)."""

from __future__ import annotations

import pytest
from policy_simulation import (
    GPU_DRAFT,
    GPU_TARGET,
    measured_cpu_policy,
    policy,
    predicted_of,
    simulate,
    trained_states,
)

from vllm_gammatune.policies import BatchView, FixedLinearCost, Verification
from vllm_gammatune.policies.cost_aware.planner import probe_ceiling
from vllm_gammatune.policies.cost_aware.probe_scheduler import ProbeScheduler
from vllm_gammatune.policies.cost_aware.request_state import ProbeRecord
from vllm_gammatune.policies.cost_aware.step_costs import StepCosts


def verified(num_draft_tokens, num_accepted_tokens, batch):
    """The verification of a request's draft in a step of ``batch``."""
    return Verification("r", 0, num_draft_tokens, num_accepted_tokens,
                        num_reqs=batch.num_reqs)


def test_reprobes_with_backoff():
    p = policy(probe_interval=4, max_probe_interval=16, probe_budget=1.0)
    state = trained_states(p, 1, drafted=4, accepted=0)[0]
    batch = BatchView(1, 1)  # where a good draft would pay, this one does not
    plans = [p.plan_batch([state], batch)[0] for _ in range(60)]
    probes = [i for i, k in enumerate(plans) if k]
    assert all(plans[i] == 1 for i in probes)
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert probes[0] == 3  # the 4th step without drafting probes
    # every probe after one that did not pay doubles the wait, up to the cap
    assert gaps[:4] == [4, 8, 16, 16]


def test_probe_resets_when_drafting_pays_again():
    p = policy(target=GPU_TARGET, draft=GPU_DRAFT, probe_interval=2)
    state = p.new_state()
    state.probes.probing, state.probes.probe_interval = True, 64
    for _ in range(20):
        p.observe(state, verified(4, 4, BatchView(1)))
    assert p.plan_batch([state], BatchView(1, 1))[0] > 0
    assert state.probes.probe_interval == 2 and not state.probes.probing


def test_probe_budget_bounds_the_time_probes_add():
    """Where drafting does not pay, the time probes lose is at most the
    budget's share of the predicted engine time, shared by every request (new
    ones included), and probes still come."""
    budget = 0.02
    p = policy(probe_interval=2, max_probe_interval=4, probe_budget=budget)
    states = trained_states(p, 4, drafted=4, accepted=0)
    batch = BatchView(4, 4)
    skip_seconds = predicted_of(p, [0.01] * 4, batch, [0] * 4)[1]
    extra = total = 0.0
    probe_steps = []
    for step in range(2000):
        if step % 50 == 49:  # a request leaves, a fresh one (interval 2) joins
            states[step % 4] = p.new_state()
        rates = [p.acceptance.rate(s.acceptance) for s in states]
        plan = p.plan_batch(states, batch)
        tokens, seconds = predicted_of(p, rates, batch, plan)
        total += seconds
        if max(plan) > 0:
            probe_steps.append(step)
            extra += seconds - tokens * skip_seconds / 4  # 4 tokens without probes
            for state, k in zip(states, plan):
                if k:
                    p.observe(state, verified(k, 0, batch))
    assert probe_steps, "probes must still come"
    assert extra <= budget * total
    # without the budget the same run probes at least every max_probe_interval steps
    unlimited = policy(probe_interval=2, max_probe_interval=4, probe_budget=1.0)
    states = trained_states(unlimited, 4, drafted=4, accepted=0)
    unlimited_probes = sum(max(unlimited.plan_batch(states, batch)) > 0 for _ in range(2000))
    assert unlimited_probes > 3 * len(probe_steps)
    assert skip_seconds > 0


def test_no_probe_where_even_a_perfect_draft_would_not_pay():
    # a draft pass costs as much as a target step: drafting never pays
    p = policy(draft=FixedLinearCost(0.5, 0.0), probe_interval=2)
    states = trained_states(p, 4, drafted=4, accepted=0)
    plans = [p.plan_batch(states, BatchView(4, 4)) for _ in range(20)]
    assert all(plan == [0] * 4 for plan in plans)


def test_no_probe_pays_a_catch_up_the_budget_cannot_cover():
    """At batch 16, where probing new requests means catching the draft up
    over their whole prompts, no probe fits the budget; the same requests
    without a catch-up still probe (the price is what stops them)."""
    def drafted_steps(catch_up: int) -> int:
        p = measured_cpu_policy(probe_interval=2, max_probe_interval=4)
        states = [p.new_state() for _ in range(16)]
        batch = BatchView(16, 16, catch_up_tokens=(catch_up,) * 16,
                          remaining_tokens=(60,) * 16)
        return sum(max(p.plan_batch(states, batch)) > 0 for _ in range(400))

    assert drafted_steps(0) > 0
    assert drafted_steps(135) == 0


def test_no_probe_catches_up_a_prompt_not_even_a_perfect_draft_would_repay():
    """A new request whose prompt is its catch-up probes at batch 1, where a
    draft that is always right repays it within the request's remaining
    tokens; at batch 8 a short prompt's request probes with the others, a
    long one stops every probe: under the pace rule the others would wait
    through its catch-up, so no rate they could learn makes that batch draft.
    A catch-up is spread over the steps the request would draft, at the share
    of requests that decode steps at its batch size lately drafted: where
    none did, it is charged whole and only a short one probes."""
    def first_plan(num_reqs: int, catch_up: int, drafted_share: float = 1.0) -> list[int]:
        p = measured_cpu_policy()
        for _ in range(60):  # decode steps at this batch size that drafted so often
            p.catch_up_shares.free_drafting.add(num_reqs, drafted_share)
            p.catch_up_shares.planned_drafting.add(num_reqs, drafted_share)
        states = [p.new_state() for _ in range(num_reqs)]
        return p.plan_batch(states, BatchView(
            num_reqs, num_reqs, catch_up_tokens=(0,) * (num_reqs - 1) + (catch_up,),
            remaining_tokens=(48,) * num_reqs))

    assert first_plan(1, 900) == [1]
    assert first_plan(8, 100) == [1] * 8
    assert first_plan(8, 300) == first_plan(8, 900) == [0] * 8
    assert first_plan(1, 900, drafted_share=0.0) == [0]
    assert first_plan(1, 100, drafted_share=0.0) == [1]
    assert first_plan(8, 100, drafted_share=0.0) == [1] * 7 + [0]
    assert first_plan(8, 20, drafted_share=0.0) == [1] * 8


def test_a_probe_ceiling_charges_a_share_of_the_draft_passes():
    """``probe_ceiling``: a request's share of the step's draft passes counts.
    On costs like those measured at batch 8 on a 2-core CPU (a draft pass
    0.4 of a target step), a perfect draft repays a 300-token prompt, not an
    880-token one; alone at batch 1 it repays both."""
    busy = StepCosts(target_now=0.176, per_token=0.0026, first_pass=0.069,
                     later_pass=0.066, catch_up_base=0.0, catch_up_per_token=0.00068)
    ceiling = probe_ceiling(busy, 8, (0, 300, 880) + (0,) * 5, (48,) * 8,
                            max_num_draft_tokens=8)
    assert ceiling[0] > 0 and ceiling[1] > 0 and ceiling[2] == 0
    # without its share of the passes, the 880-token prompt would pass too
    no_passes = StepCosts(target_now=0.176, per_token=0.0026, first_pass=0.0,
                          later_pass=0.0, catch_up_base=0.0, catch_up_per_token=0.00068)
    assert probe_ceiling(no_passes, 8, (880,) + (0,) * 7, (48,) * 8,
                         max_num_draft_tokens=8)[0] > 0
    quiet = StepCosts(target_now=0.17, per_token=0.003, first_pass=0.03, later_pass=0.03,
                      catch_up_base=0.0, catch_up_per_token=0.00068)
    assert probe_ceiling(quiet, 1, (880,), (48,), max_num_draft_tokens=8) == [8]
    assert probe_ceiling(quiet, 1, (880,), (48,), (3,), max_num_draft_tokens=8) == [3]


def test_the_scheduler_probes_the_due_and_the_half_due_within_its_budget():
    """The scheduler alone: a due request probes and one at least half-way
    due joins it; a request that drafts for its own sake does not; the budget
    refuses a probe step that would lose more than its share."""
    costs = StepCosts(target_now=0.1, per_token=0.01, first_pass=0.1, later_pass=0.02,
                      catch_up_base=0.0, catch_up_per_token=0.001)
    due, half, early, drafting = (ProbeRecord(steps_since_draft=s, probe_interval=4)
                                  for s in (3, 1, 0, 5))
    states, plan = [due, half, early, drafting], [0, 0, 0, 2]
    scheduler = ProbeScheduler(4, 16, budget=1.0)
    assert scheduler.any_due(states, plan)
    probed = scheduler.add_probes(states, plan, True, costs, [0.5] * 4, ())
    assert probed.probes == [True, True, False, False]
    assert probed.lengths == [1, 1, 0, 2]
    assert not any(scheduler.add_probes(states, plan, False, costs, [0.5] * 4, ()).probes)
    scheduler.advance(states, plan, probed.probes)
    assert (due.steps_since_draft, due.probing, early.steps_since_draft) == (0, True, 1)
    # the next probe without drafting in between backs off
    scheduler.advance([due], [0], [True])
    assert due.probe_interval == 8
    # a step that would not draft otherwise, where the probe loses time
    # (0.21 s for 1.5 tokens against 0.1 s a token: 0.06 s lost). The window
    # counts as full from the first step: the allowance is the budget times
    # 200 steps at the mean predicted step (0.21 s): 0.084 s at 0.002 admits
    # it, 0.042 s at 0.001 does not
    alone = [ProbeRecord(steps_since_draft=3, probe_interval=4)]
    admitted = ProbeScheduler(4, 16, budget=0.002).add_probes(alone, [0], True, costs,
                                                              [0.5], ())
    assert admitted.probes == [True]
    assert admitted.predicted_seconds == pytest.approx(0.21)
    refused = ProbeScheduler(4, 16, budget=0.001).add_probes(alone, [0], True, costs,
                                                             [0.5], ())
    assert refused.probes == [False] and refused.lengths == [0]
    assert refused.predicted_seconds == pytest.approx(costs.target_now)


def test_a_young_engine_probes_after_a_bad_start():
    """Three verifications of a hard first request (1 of 6 draft tokens
    accepted) set the engine-wide rate of every new request below what pays
    at batch 1. A probe of the next request, with its prompt to catch up, is
    what can lift it; it must fit the budget although the engine has run
    only a few steps, and once it is accepted the request drafts."""
    # the real pair's costs on the 2-core CPU at batch 1; the draft's line
    # prices the catch-up (2 ms a token)
    p = policy(target=FixedLinearCost(0.136, 0.0), draft=FixedLinearCost(0.043, 0.002))
    first = p.new_state()
    for accepted in (0, 1, 0):
        k = p.plan_batch([first], BatchView(1, 1))[0]
        p.observe(first, verified(k, min(accepted, k), BatchView(1, 1)))
    state, missed, kinds = p.new_state(), 60, []
    for remaining in range(64, 48, -1):
        batch = BatchView(1, 1, catch_up_tokens=(missed,), remaining_tokens=(remaining,))
        k = p.plan_batch([state], batch)[0]
        kinds.append(p.last_decision.kind)
        if k:
            p.observe(state, verified(k, k, batch))
            missed = 0
        else:
            missed += 1
    # the engine-wide rate alone does not pay (a probe, not a draft), and
    # the request's first decode step probes rather than waiting its interval
    assert kinds[0] == "probe"
    assert kinds[1:] == ["draft"] * (len(kinds) - 1)


def test_a_fresh_request_probes_at_once_then_at_its_interval():
    """A request whose draft was never verified probes on its first step at
    length 0; once a probe is verified (rejected here) it waits its interval,
    and backs off as before."""
    p = policy(probe_interval=4, max_probe_interval=16, probe_budget=1.0)
    trained_states(p, 1, drafted=4, accepted=0)  # the engine's rate: drafting does not pay
    state, batch, probes = p.new_state(), BatchView(1, 1), []
    for step in range(30):
        k = p.plan_batch([state], batch)[0]
        if k:
            probes.append(step)
            p.observe(state, verified(k, 0, batch))
    assert probes[:4] == [0, 4, 12, 28]


def test_an_accepted_probe_is_followed_by_another_at_once():
    """A new request after hard ones: the engine's rate says drafting does
    not pay, and one accepted probe does not lift the request's rate across
    the line (the prior's pseudo-observations). Each accepted probe makes
    the next due at once, so the request probes on every step until its own
    rate pays, and then drafts, without waiting the base interval."""
    p = policy(probe_interval=8, max_probe_interval=64, probe_budget=1.0)
    trained_states(p, 1, drafted=4, accepted=0)  # the engine's rate: drafting does not pay
    state, batch, kinds = p.new_state(), BatchView(1, 1), []
    for _ in range(12):
        k = p.plan_batch([state], batch)[0]
        kinds.append(p.last_decision.kind)
        if k:
            p.observe(state, verified(k, k, batch))
    assert kinds[:2] == ["probe", "probe"]  # one accepted probe is not enough
    assert "skip" not in kinds  # and none waits the interval
    assert kinds[-1] == "draft"


def test_a_rejected_probe_after_accepted_ones_waits_the_base_interval():
    p = policy(probe_interval=8, max_probe_interval=64, probe_budget=1.0)
    trained_states(p, 1, drafted=4, accepted=0)
    state, batch, probes = p.new_state(), BatchView(1, 1), []
    for step in range(40):
        k = p.plan_batch([state], batch)[0]
        if k:
            assert p.last_decision.kind == "probe"
            probes.append(step)
            p.observe(state, verified(k, k if len(probes) <= 2 else 0, batch))
    # accepted at 0 and 1; rejected at 2 and after: the base interval, then back-off
    assert probes[:5] == [0, 1, 2, 10, 26]


@pytest.mark.parametrize("batch_size, drafted, accepted, due_at_once", [
    (1, 1, 1, True),    # an accepted probe at batch 1: the next at once
    (1, 1, 0, False),   # rejected: the interval stands
    (4, 1, 1, False),   # at batch 4 a probe's step does not pay for itself
])
def test_only_a_probe_accepted_at_batch_1_makes_the_next_due_at_once(
        batch_size, drafted, accepted, due_at_once):
    p = policy(probe_interval=8)
    state = p.new_state()
    state.probes.probing, state.probes.probe_interval = True, 8
    p.observe(state, verified(drafted, accepted, BatchView(batch_size)))
    assert (state.probes.probe_interval == 1 and not state.probes.probing) == due_at_once
    assert state.probes.probe_interval == (1 if due_at_once else 8)
