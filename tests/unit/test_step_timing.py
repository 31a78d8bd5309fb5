"""The cost-aware timers: every step on the CPU, one in CUDA_TIMING_PERIOD on
CUDA, with no device synchronisation on the steps between (CUDA simulated:
a device of type "cuda" and a counting ``torch.cuda.synchronize``)."""

from __future__ import annotations

import types

import torch

from vllm_gammatune.drafter.step_timing import CUDA_TIMING_PERIOD, StepTimer


def _take(timer: StepTimer, step: int, seen: list) -> None:
    """The timings the proposer takes for the observation before the plan of
    ``step``, each as (the step it measured, its kind): the drafting phase
    measured the last step, the target phase this one."""
    timings = timer.take()
    seen += [(step - 1, type(t).__name__) for t in timings.drafting]
    seen += [(step, type(t).__name__) for t in timings.target]


def _run_steps(timer: StepTimer, num_steps: int, syncs: list):
    """Drive the timer as the proposer does: begin, plan (and take the
    timings for the observation), 3 draft passes, step end; then what the
    last step measured. Returns ([syncs per step], [(step, kind) measured])."""
    per_step, seen = [], []
    for step in range(num_steps):
        before = len(syncs)
        timer.begin_step()
        timer.on_plan(num_scheduled_tokens=8, num_reqs=2, decode_only=True)
        _take(timer, step, seen)
        timer.start_passes(first_pass_tokens=10, first_pass_is_prefill=False)
        for _ in range(3):
            timer.on_pass(num_reqs=2)
        timer.end_passes()
        timer.on_step_end()
        per_step.append(len(syncs) - before)
    timer.begin_step()
    _take(timer, num_steps, seen)
    return per_step, seen


def test_cuda_timers_synchronise_only_on_sampled_steps(monkeypatch):
    syncs = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: syncs.append(device))
    timer = StepTimer(types.SimpleNamespace(type="cuda"))
    assert timer.period == CUDA_TIMING_PERIOD > 1
    per_step, seen = _run_steps(timer, 2 * CUDA_TIMING_PERIOD, syncs)
    measured = {0, CUDA_TIMING_PERIOD}
    for step, count in enumerate(per_step):
        if step in measured:
            assert count == 5, (step, count)  # plan, first pass start, 3 passes
        elif step - 1 in measured:
            assert count == 1, (step, count)  # the plan that closes the timed step
        else:
            assert count == 0, (step, count)
    observed_steps = {step for step, _ in seen}
    assert observed_steps == {0, 1, CUDA_TIMING_PERIOD, CUDA_TIMING_PERIOD + 1}
    # the closing plan reports the timed step's cycle and target step only
    assert sorted(name for step, name in seen if step == 1) == [
        "CycleWallTime", "TargetStepTiming"]
    assert [name for step, name in seen if step == 0] == ["DraftPassTiming"] * 3


def test_cpu_timers_time_every_step():
    timer = StepTimer(torch.device("cpu"))
    assert timer.period == 1
    _, seen = _run_steps(timer, 4, [])
    for step in range(1, 4):
        names = sorted(name for s, name in seen if s == step)
        assert names == ["CycleWallTime"] + ["DraftPassTiming"] * 3 + ["TargetStepTiming"]


def test_untimed_catch_up_runs_without_a_clock_reading(monkeypatch):
    syncs = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: syncs.append(device))
    timer = StepTimer(types.SimpleNamespace(type="cuda"), period=4)
    timer.on_plan(8, 2, True)   # step 0: timed
    timer.on_step_end()
    timer.on_plan(8, 2, True)   # step 1: closes step 0, not timed
    syncs.clear()
    assert timer.time_catch_up(lambda: 7) == 7
    seen = []
    _take(timer, 2, seen)
    assert syncs == [] and not any(n == "CatchUpPassTiming" for _, n in seen)
