"""Timing the engine's steps for a policy that plans from measured costs.

For a ``CostObserver`` (``gammatune_cost``) the drafter measures what each
part of a step costs, and hands the timings over in the step's observation
(``policies.observation.CycleTimings``):

- the target step: the time from the end of one proposal to the start of the
  next; it includes what vLLM does around the forward (scheduling, sampling,
  output processing), since that is what a step costs. Steps with a prompt
  chunk are not reported: a line through prefill chunks says little about
  verifying a few draft tokens;
- each draft forward pass (timed from its start to the sampling of its
  tokens): the first over the step's target tokens and one new token per
  request, the later ones over one token per request. Over a prompt chunk
  the first pass is prefill-like and is reported as a catch-up pass;
- each catch-up pass over the positions a request missed;
- the passes each drafted step ran (timed or not);
- the wall time from one plan to the next, which the policy's check against
  the clock charges to the plan.

What was measured before a proposal starts (``begin_step``) is the last
step's drafting; what is measured after, before the plan, is the target's
phase of the cycle (``CycleTimings``).

On the CPU every step is timed: a forward pass there is synchronous, so the
clock readings cost nothing. On CUDA a reading has to wait for the device,
so the timer measures one step in ``CUDA_TIMING_PERIOD`` (and reads the
clock once more at the next plan, to close the intervals that step opened).
"""

from __future__ import annotations

import time

import torch

from vllm_gammatune.policies.observation import (
    CatchUpPassTiming,
    CycleTimings,
    CycleWallTime,
    DraftPassTiming,
    PassesRun,
    TargetStepTiming,
    Timing,
)


#: On CUDA, the timers measure (and synchronise the device on) one step in this many.
CUDA_TIMING_PERIOD = 8


class StepTimer:
    """The clock readings of one drafter, kept for its policy's observation.

    Args:
        period: time one step in ``period`` (default: every step on the CPU,
            ``CUDA_TIMING_PERIOD`` on CUDA).
    """

    def __init__(self, device: torch.device, period: int | None = None):
        self.device = device
        self.period = period or (CUDA_TIMING_PERIOD if device.type == "cuda" else 1)
        self._plans = 0
        #: this step is timed
        self._measuring = True
        self._clock = time.perf_counter
        self._last_step_end: float | None = None
        #: when the last plan was made (the cycle check's wall clock)
        self._last_plan_time: float | None = None
        # start time and token count of the draft pass under way
        self._pass_started: float | None = None
        self._pass_tokens = 0
        self._timing_passes = False
        #: the pass under way is the first over a step with a prompt chunk
        self._first_pass_is_prefill = False
        #: timings measured before this proposal began (the last step's
        #: drafting), and since (``begin_step``)
        self._drafting: list[Timing] = []
        self._target: list[Timing] = []

    def begin_step(self) -> None:
        """A proposal begins: what follows is its target phase."""
        self._drafting.extend(self._target)
        self._target = []

    def _add(self, timing: Timing) -> None:
        self._target.append(timing)

    def take(self) -> CycleTimings:
        """The timings measured since the last ``take``, for the step's
        observation."""
        timings = CycleTimings(tuple(self._drafting), tuple(self._target))
        self._drafting, self._target = [], []
        return timings

    def passes_run(self, num_passes: int) -> None:
        """The step's draft ended after ``num_passes`` passes."""
        self._add(PassesRun(num_passes))

    def synchronized_clock(self) -> float:
        """Now, after the device has finished what was queued (honest timing)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return self._clock()

    def forget_last_step(self) -> None:
        """A proposal without drafting: the next gap is not one target step."""
        self._last_step_end = None
        self._last_plan_time = None

    def on_plan(self, num_scheduled_tokens: int, num_reqs: int, decode_only: bool) -> None:
        """Before a plan: the wall time since the last plan, and (on a step
        without a prompt chunk) the target step that just ran, when the last
        step was timed; then whether this step is timed."""
        self._measuring = self._plans % self.period == 0
        self._plans += 1
        closing = self._last_plan_time is not None or self._last_step_end is not None
        if not (self._measuring or closing):
            return
        now = self.synchronized_clock()
        if self._last_plan_time is not None:
            self._add(CycleWallTime(now - self._last_plan_time))
        if decode_only and self._last_step_end is not None:
            self._add(TargetStepTiming(num_scheduled_tokens, now - self._last_step_end,
                                       num_reqs))
        self._last_plan_time = now if self._measuring else None
        self._last_step_end = None

    def on_step_end(self) -> None:
        """The proposal is done: the next target step starts now."""
        self._last_step_end = self._clock() if self._measuring else None

    def time_catch_up(self, run) -> int:
        """Run a catch-up (``run()`` returns its tokens) and report its time."""
        if not self._measuring:
            return run()
        started = self.synchronized_clock()
        num_tokens = run()
        self._add(CatchUpPassTiming(num_tokens, self.synchronized_clock() - started))
        return num_tokens

    def start_passes(self, first_pass_tokens: int, first_pass_is_prefill: bool) -> None:
        """The draft passes of this step start now; the first runs over
        ``first_pass_tokens`` tokens."""
        if not self._measuring:
            return
        self._pass_tokens = first_pass_tokens
        self._first_pass_is_prefill = first_pass_is_prefill
        self._pass_started = self.synchronized_clock()
        self._timing_passes = True

    def end_passes(self) -> None:
        self._pass_started = None
        self._timing_passes = False
        self._first_pass_is_prefill = False

    def on_pass(self, num_reqs: int) -> None:
        """A draft pass has produced its logits: report it; the next pass
        (if any) runs over one token per request."""
        if not self._timing_passes:
            return
        now = self.synchronized_clock()
        if self._first_pass_is_prefill:
            self._add(CatchUpPassTiming(self._pass_tokens, now - self._pass_started))
            self._first_pass_is_prefill = False
        else:
            self._add(DraftPassTiming(self._pass_tokens, now - self._pass_started, num_reqs))
        self._pass_started, self._pass_tokens = now, num_reqs
