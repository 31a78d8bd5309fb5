"""The cost-aware timers: every step on the CPU, one in CUDA_TIMING_PERIOD on
CUDA, with no device synchronisation on the steps between (CUDA simulated:
a device of type "cuda" and a counting ``torch.cuda.synchronize``)."""

from __future__ import annotations

import types

import torch

from vllm_gammatune.drafter.step_timing import CUDA_TIMING_PERIOD, StepTimer


class RecordingPolicy:
    def __init__(self):
        self.seen = []

    def __getattr__(self, name):
        if name.startswith("observe_"):
            return lambda *args: self.seen.append((self.step, name))
        raise AttributeError(name)


def _run_steps(timer: StepTimer, policy: RecordingPolicy, num_steps: int, syncs: list):
    """Drive the timer as the proposer does: plan, 3 draft passes, step end."""
    per_step = []
    for step in range(num_steps):
        policy.step = step
        before = len(syncs)
        timer.on_plan(num_scheduled_tokens=8, num_reqs=2, decode_only=True)
        timer.start_passes(first_pass_tokens=10, first_pass_is_prefill=False)
        for _ in range(3):
            timer.on_pass(num_reqs=2)
        timer.end_passes()
        timer.on_step_end()
        per_step.append(len(syncs) - before)
    return per_step


def test_cuda_timers_synchronise_only_on_sampled_steps(monkeypatch):
    syncs = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: syncs.append(device))
    policy = RecordingPolicy()
    timer = StepTimer(policy, types.SimpleNamespace(type="cuda"))
    assert timer.period == CUDA_TIMING_PERIOD > 1
    per_step = _run_steps(timer, policy, 2 * CUDA_TIMING_PERIOD, syncs)
    measured = {0, CUDA_TIMING_PERIOD}
    for step, count in enumerate(per_step):
        if step in measured:
            assert count == 5, (step, count)  # plan, first pass start, 3 passes
        elif step - 1 in measured:
            assert count == 1, (step, count)  # the plan that closes the timed step
        else:
            assert count == 0, (step, count)
    observed_steps = {step for step, _ in policy.seen}
    assert observed_steps == {0, 1, CUDA_TIMING_PERIOD, CUDA_TIMING_PERIOD + 1}
    # the closing plan reports the timed step's cycle and target step only
    assert sorted(name for step, name in policy.seen if step == 1) == [
        "observe_cycle_wall_time", "observe_target_step"]
    assert [name for step, name in policy.seen if step == 0] == ["observe_draft_pass"] * 3


def test_cpu_timers_time_every_step():
    policy = RecordingPolicy()
    timer = StepTimer(policy, torch.device("cpu"))
    assert timer.period == 1
    _run_steps(timer, policy, 4, [])
    for step in range(1, 4):
        names = sorted(name for s, name in policy.seen if s == step)
        assert names == ["observe_cycle_wall_time"] + ["observe_draft_pass"] * 3 + [
            "observe_target_step"]


def test_untimed_catch_up_runs_without_a_clock_reading(monkeypatch):
    syncs = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: syncs.append(device))
    policy = RecordingPolicy()
    policy.step = 1
    timer = StepTimer(policy, types.SimpleNamespace(type="cuda"), period=4)
    timer.on_plan(8, 2, True)   # step 0: timed
    timer.on_step_end()
    timer.on_plan(8, 2, True)   # step 1: closes step 0, not timed
    syncs.clear()
    assert timer.time_catch_up(lambda: 7) == 7
    assert syncs == [] and not any(n == "observe_catch_up_pass" for _, n in policy.seen)
