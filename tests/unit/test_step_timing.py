"""The cost-aware timers: every step on the CPU; on CUDA one in
CUDA_TIMING_PERIOD, from marks the device reaches later than the host takes
them (simulated: a clock whose marks are reached only when the test says),
handed over per cycle once reached, and never a device synchronisation."""

from __future__ import annotations

import itertools
import types

import pytest
import torch

from vllm_gammatune.drafter.device_clock import HostClock, clock_for
from vllm_gammatune.drafter.step_timing import CUDA_TIMING_PERIOD, StepTimer
from vllm_gammatune.policies.observation import CycleTimings


class LateClock:
    """Marks like CUDA events: reached only once ``reach_all`` is called
    (the device has caught up with what was queued); ``readings`` counts
    every question asked of it."""

    def __init__(self):
        self._ticks = itertools.count()
        self._reached = -1
        self.marks = 0

    def mark(self) -> int:
        self.marks += 1
        return next(self._ticks)

    def ready(self, mark: int) -> bool:
        return mark <= self._reached

    def seconds(self, start: int, end: int) -> float:
        assert self.ready(end), "a mark is read only once reached"
        return (end - start) / 1000

    def reach_all(self) -> None:
        self._reached = next(self._ticks)


def _kinds(cycles: tuple[CycleTimings, ...]) -> list[tuple[int, str, list[str]]]:
    return [(c.step, phase, [type(t).__name__ for t in timings])
            for c in cycles
            for phase, timings in (("drafting", c.drafting), ("target", c.target))]


def _drive(timer: StepTimer, step: int, lag: int, clock=None) -> tuple[CycleTimings, ...]:
    """One proposal as the drafter makes it: begin, plan (taking the cycles
    verified by now, ``lag`` steps back), 3 draft passes, step end; a late
    clock's marks are reached after the step (the step's own read)."""
    timer.begin_step(step)
    timer.on_plan(num_scheduled_tokens=8, num_reqs=2, decode_only=True)
    cycles = timer.take(through=step - lag)
    timer.start_passes(first_pass_tokens=10, first_pass_is_prefill=False)
    for _ in range(3):
        timer.on_pass(num_reqs=2)
    timer.end_passes()
    timer.passes_run(3)
    timer.on_step_end()
    if clock is not None:
        clock.reach_all()
    return cycles


def test_the_cpu_times_every_cycle_and_hands_it_over_at_the_next_plan():
    timer = StepTimer(torch.device("cpu"))
    assert timer.period == 1 and isinstance(timer.clock, HostClock)
    seen = [_drive(timer, step, lag=1) for step in range(4)]
    assert seen[0] == ()
    for step in range(1, 4):
        assert _kinds(seen[step]) == [
            (step - 1, "drafting", ["DraftPassTiming"] * 3 + ["PassesRun"]),
            (step - 1, "target", ["CycleWallTime", "TargetStepTiming"])]
    first_pass = seen[2][0].drafting[0]
    assert first_pass.num_tokens == 10 and first_pass.seconds >= 0.0


def test_a_late_clock_hands_each_cycle_over_with_its_verification(monkeypatch):
    """The CUDA hot path: a cycle's verification reaches the policy two
    plans after its own, and so does the cycle, whole, once its marks are
    reached; nothing waits for the device."""
    monkeypatch.setattr(torch.cuda, "synchronize", _no_sync)
    clock = LateClock()
    timer = StepTimer(torch.device("cpu"), period=1, clock=clock)
    seen = [_drive(timer, step, lag=2, clock=clock) for step in range(5)]
    assert seen[0] == seen[1] == ()
    for step in range(2, 5):
        assert [c.step for c in seen[step]] == [step - 2]
        (cycle,) = seen[step]
        assert len(cycle.drafting) == 4 and [type(t).__name__ for t in cycle.target][-1] \
            == "TargetStepTiming"
        assert all(t.seconds > 0 for t in cycle.drafting if hasattr(t, "seconds"))


def test_marks_not_yet_reached_hold_their_cycle_and_every_later_one():
    clock = LateClock()
    timer = StepTimer(torch.device("cpu"), period=1, clock=clock)
    _drive(timer, 0, lag=1)            # the device has reached nothing yet
    assert _drive(timer, 1, lag=1) == ()
    clock.reach_all()
    timer.begin_step(2)
    timer.on_plan(8, 2, True)          # a new mark, not reached
    cycles = timer.take(through=1)
    # cycle 0 is whole; cycle 1's target step ends at a mark not yet reached
    assert [c.step for c in cycles] == [0]
    clock.reach_all()
    timer.begin_step(3)
    assert [c.step for c in timer.take(through=2)] == [1]


@pytest.mark.parametrize("period", [CUDA_TIMING_PERIOD, 4])
def test_cuda_times_one_step_in_a_period_from_events_never_synchronising(monkeypatch, period):
    monkeypatch.setattr(torch.cuda, "synchronize", _no_sync)
    clock = LateClock()
    device = types.SimpleNamespace(type="cuda")
    timer = StepTimer(device, period=None if period == CUDA_TIMING_PERIOD else period,
                      clock=clock)
    assert timer.period == period
    marks_per_step = []
    cycles = []
    for step in range(2 * period):
        before = clock.marks
        cycles += _drive(timer, step, lag=2, clock=clock)
        marks_per_step.append(clock.marks - before)
    timed = {0, period}
    for step, marks in enumerate(marks_per_step):
        if step in timed:
            assert marks == 5, (step, marks)   # first pass start, 3 passes, step end
        elif step - 1 in timed:
            assert marks == 1, (step, marks)   # the plan that closes the timed step
        else:
            assert marks == 0, (step, marks)
    timed_passes = [c.step for c in cycles if any(type(t).__name__ == "DraftPassTiming"
                                                  for t in c.drafting)]
    assert timed_passes == [0, period][:len(timed_passes)] and timed_passes


def test_untimed_catch_up_runs_without_a_mark():
    clock = LateClock()
    timer = StepTimer(types.SimpleNamespace(type="cuda"), period=4, clock=clock)
    timer.begin_step(0)
    timer.on_plan(8, 2, True)   # step 0: timed
    timer.take()
    timer.on_step_end()
    timer.begin_step(1)
    timer.on_plan(8, 2, True)   # step 1: closes step 0, not timed
    timer.take()
    marks = clock.marks
    assert timer.time_catch_up(lambda: 7) == 7
    assert clock.marks == marks


def test_the_clock_follows_the_device():
    assert isinstance(clock_for(torch.device("cpu")), HostClock)
    assert type(clock_for(torch.device("cuda", 0))).__name__ == "CudaEventClock"


def _no_sync(*args, **kwargs):
    raise AssertionError("the timer waited for the device")
