"""Where each measured timing goes: its cost fit, and the check of the cycle
it belongs to (``cycle_check``), keyed by the step whose plan opened that
cycle. A cost fit learns from every timing, whenever it arrives; a cycle
that was closed before its timings arrived (a device's timings read late)
is not checked. Pure Python.
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm_gammatune.policies.cost_aware.cycle_check import CycleCheck
from vllm_gammatune.policies.cost_aware.step_costs import CostFits
from vllm_gammatune.policies.observation import (
    CatchUpPassTiming,
    CycleWallTime,
    DraftPassTiming,
    PassesRun,
    TargetStepTiming,
    Timing,
)


def feed_timings(timings: Sequence[Timing], step: int, costs: CostFits,
                 check: CycleCheck | None, seconds_per_pass: float) -> None:
    """Each timing of the cycle planned at ``step``, in the order measured,
    to its fit and (with a check) to the cycle's check; ``seconds_per_pass``
    prices the passes a per-token stop added to or cut from the plan."""
    for timing in timings:
        if isinstance(timing, TargetStepTiming):
            costs.add_target_step(timing.num_scheduled_tokens, timing.seconds,
                                  timing.num_reqs)
            if check is not None:
                check.on_target_step(step, timing.seconds, timing.num_reqs)
        elif isinstance(timing, DraftPassTiming):
            costs.add_draft_pass(timing.num_tokens, timing.seconds, timing.num_reqs)
            if check is not None:
                check.on_draft_pass(step, timing.seconds)
        elif isinstance(timing, CatchUpPassTiming):
            costs.add_catch_up_pass(timing.num_tokens, timing.seconds)
            if check is not None:
                check.on_catch_up_pass(step, timing.seconds)
        elif check is None:
            continue
        elif isinstance(timing, PassesRun):
            # the per-token stop may end a step before its planned passes
            check.on_draft_passes_run(step, timing.num_passes, seconds_per_pass)
        elif isinstance(timing, CycleWallTime):
            check.on_wall_time(step, timing.seconds)
