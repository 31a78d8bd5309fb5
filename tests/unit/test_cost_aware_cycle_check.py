"""The model checked against the clock (``cost_aware.cycle_check``)."""

from __future__ import annotations

import pytest
from policy_simulation import policy, simulate

from vllm_gammatune.policies import CycleCheck


def _close(check: CycleCheck):
    """Close the cycle planned at step 0: what it measured, or None."""
    closed = check.close_through(0)
    return closed[0][1] if closed else None


def test_cycle_check_records_only_whole_cycles():
    check = CycleCheck(min_cycles=1)

    def cycle(passes_timed=2, target_batch=4, seconds=0.1, draft_passes=2):
        check.open(0, 4, draft_passes, predicted_tokens=8.0, predicted_seconds=0.4)
        for _ in range(passes_timed):
            check.on_draft_pass(0, 0.05)
        check.on_accepted(0, 3)
        check.on_target_step(0, seconds, target_batch)
        return _close(check)

    assert cycle()
    assert not cycle(passes_timed=1)  # a draft pass was not timed (prefill step)
    assert not cycle(target_batch=3)  # a request left before the verification
    assert not cycle(seconds=30.0)  # an idle gap, not a step
    assert not _close(check)  # nothing open
    assert check.num_cycles(4, drafted=True) == 1
    # realized (4 + 3) tokens in 0.2 s against 8 predicted in 0.4 s
    assert check.efficiency(4, drafted=True) == pytest.approx((7 / 0.2) / (8 / 0.4))
    assert check.num_cycles(4, drafted=False) == 0
    # a catch-up far costlier than predicted is no idle gap: it counts
    caught_up = CycleCheck(min_cycles=1)
    caught_up.open(0, 4, 1, predicted_tokens=5.0, predicted_seconds=0.4)
    caught_up.on_catch_up_pass(0, 5.0)
    caught_up.on_draft_pass(0, 0.05)
    caught_up.on_target_step(0, 0.1, 4)
    assert _close(caught_up).seconds == pytest.approx(5.15)
    assert caught_up.num_cycles(4, drafted=True) == 1


def test_cycle_wall_time_counts_what_no_pass_timer_sees():
    """Reported wall time from plan to plan replaces the sum of the timed
    parts: work around the draft passes (input preparation) is charged too."""
    check = CycleCheck(min_cycles=1)
    check.open(0, 4, 1, predicted_tokens=6.0, predicted_seconds=0.2)
    check.on_draft_pass(0, 0.05)
    check.on_accepted(0, 2)
    check.on_target_step(0, 0.15, 4)
    check.on_wall_time(0, 0.3)  # 0.1 s more than the timed parts
    measured = _close(check)
    assert measured.tokens == 6 and measured.seconds == pytest.approx(0.3)
    assert check.efficiency(4, drafted=True) == pytest.approx((6 / 0.3) / (6 / 0.2))
    # an idle gap seen by the wall clock is not a cycle either
    check.open(0, 4, 0, predicted_tokens=4.0, predicted_seconds=0.1)
    check.on_target_step(0, 0.1, 4)
    check.on_wall_time(0, 30.0)
    assert _close(check) is None


def test_a_revised_prediction_is_what_the_cycle_is_checked_against():
    """The plan counted 2 passes and 3 tokens; the per-token stop ran 1
    pass, and the tokens it kept were expected to yield 2."""
    check = CycleCheck(min_cycles=1)
    check.open(0, 1, 2, predicted_tokens=3.0, predicted_seconds=0.2)
    check.revise(0, -1.0, 0.0)
    check.on_draft_passes_run(0, 1, seconds_per_pass=0.05)
    check.on_draft_pass(0, 0.05)
    check.on_accepted(0, 1.0)
    check.on_target_step(0, 0.1, 1)
    assert _close(check).seconds == pytest.approx(0.15)
    assert check.efficiency(1, drafted=True) == pytest.approx(1.0)
    check.revise(0, 5.0, 5.0)  # nothing open: nothing to revise
    assert check.efficiency(1, drafted=True) == pytest.approx(1.0)


def test_drafting_scale_compares_drafted_with_skipped_cycles():
    check = CycleCheck(memory=0.9, min_cycles=3, scale_bounds=(0.25, 4.0))
    for i in range(10):
        # the model is 20% pessimistic on plain steps, and flatters drafting:
        # drafted steps emit what it says but take twice its 0.2 s
        check.open(0, 4, 0, predicted_tokens=4.0, predicted_seconds=0.12)
        check.on_target_step(0, 0.10, 4)
        _close(check)
        if i < 2:
            assert check.drafting_scale(4) == 1.0  # no drafted evidence yet
        check.open(0, 4, 1, predicted_tokens=6.0, predicted_seconds=0.2)
        check.on_draft_pass(0, 0.1)
        check.on_accepted(0, 2)
        check.on_target_step(0, 0.3, 4)
        _close(check)
    assert check.drafting_scale(4) == pytest.approx(0.5 / 1.2)
    assert check.is_informed(4) and not check.is_informed(16)
    assert check.drafting_scale(16) == 1.0  # per batch size
    with pytest.raises(ValueError):
        CycleCheck(memory=0.0)


def test_measured_cycles_overrule_a_model_that_flatters_drafting():
    # the check alone: no margin on the predicted gain, no pace rule
    honest = policy(min_draft_gain=0.0, keep_pace=False)
    plans = simulate(honest, 4, 200, rate=0.93, drafted_step_slowdown=1.0)
    assert sum(max(plan) > 0 for plan in plans[50:]) > 0.9 * 150  # drafting pays here
    assert 0.8 < honest.cycle_check.drafting_scale(4) < 1.25

    flattered = policy(min_draft_gain=0.0, keep_pace=False)
    plans = simulate(flattered, 4, 400, rate=0.93, drafted_step_slowdown=2.0)
    late = plans[200:]
    assert flattered.cycle_check.drafting_scale(4) < 0.7
    # only probes draft now (one token), and they still come
    assert all(max(plan) <= 1 for plan in late)
    assert 0 < sum(max(plan) > 0 for plan in late) < 0.2 * len(late)

    unchecked = policy(check_cycles=False, min_draft_gain=0.0, keep_pace=False)
    plans = simulate(unchecked, 4, 200, rate=0.93, drafted_step_slowdown=2.0)
    assert sum(max(plan) > 0 for plan in plans[50:]) > 0.9 * 150


def test_cycles_open_side_by_side_close_when_their_timings_arrive():
    """The CUDA hot path: a plan's verification and timings arrive after the
    next plan, so two cycles are open at once, each fed by its own step."""
    check = CycleCheck(min_cycles=1)
    check.open(0, 4, 1, predicted_tokens=6.0, predicted_seconds=0.2)
    check.open(1, 4, 0, predicted_tokens=4.0, predicted_seconds=0.1)
    assert check.close_through(-1) == []
    check.on_draft_pass(0, 0.05)
    check.on_accepted(0, 2)
    check.on_target_step(0, 0.15, 4)
    check.on_target_step(1, 0.1, 4)
    ((step, measured),) = check.close_through(0)
    assert step == 0 and measured.tokens == 6 and measured.seconds == pytest.approx(0.2)
    ((step, measured),) = check.close_through(1)
    assert step == 1 and measured.tokens == 4
    # timings of a cycle already closed feed nothing
    check.on_target_step(0, 5.0, 4)
    assert check.close_through(5) == []


@pytest.mark.parametrize("lag", [1, 2])
def test_late_observations_still_correct_a_flattering_model(lag):
    """Observations two plans old (the hot path) measure the same cycles:
    the check still finds drafting honest, or flattered, as at lag 1."""
    honest = policy(min_draft_gain=0.0, keep_pace=False)
    simulate(honest, 4, 200, rate=0.93, drafted_step_slowdown=1.0, lag=lag)
    assert honest.cycle_check.is_informed(4)
    assert 0.8 < honest.cycle_check.drafting_scale(4) < 1.25
    flattered = policy(min_draft_gain=0.0, keep_pace=False)
    simulate(flattered, 4, 400, rate=0.93, drafted_step_slowdown=2.0, lag=lag)
    assert flattered.cycle_check.drafting_scale(4) < 0.7
