"""Timing the engine's steps for a policy that plans from measured costs.

For a ``CostObserver`` (``gammatune_cost``) the drafter measures what each
part of a step costs, and hands the timings over, one ``CycleTimings`` per
cycle (``policies.observation``):

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
- the host's wall time from one plan to the next, which the policy's check
  against the clock charges to the plan.

A cycle is the plan of one step: its drafting (measured after the plan) and
the target phase after it (measured before the next plan). Its timings are
handed over once the device has reached every mark and its verification has
reached the host too (``take(through=...)``): at the next plan on the host
path, at the one after on the CUDA hot path.

The marks come from a ``DeviceClock``: the host's clock on the CPU, where a
forward pass is synchronous; CUDA events on CUDA, read once the device has
passed them, so the timer never waits for the device. There it times one
step in ``CUDA_TIMING_PERIOD`` (each timed step records 4 + K events; the
plan after it reads the clock once more, to close the intervals that step
opened).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from vllm_gammatune.drafter.device_clock import DeviceClock, clock_for
from vllm_gammatune.policies.observation import (
    CatchUpPassTiming,
    CycleTimings,
    CycleWallTime,
    DraftPassTiming,
    PassesRun,
    TargetStepTiming,
    Timing,
)


#: On CUDA, the timers measure (and record events on) one step in this many.
CUDA_TIMING_PERIOD = 8


@dataclass(slots=True)
class _Entry:
    """A timing of the cycle planned at ``cycle``: ``timing`` once known,
    else the marks between which it ran and how to build it from seconds."""

    cycle: int
    drafting: bool
    timing: Timing | None = None
    start: Any = None
    end: Any = None
    build: Callable[[float], Timing] | None = None


class StepTimer:
    """The clock readings of one drafter, kept for its policy's observations.

    Args:
        period: time one step in ``period`` (default: every step on the CPU,
            ``CUDA_TIMING_PERIOD`` on CUDA).
        clock: the marks' clock (default: ``device_clock.clock_for(device)``).
    """

    def __init__(self, device: torch.device, period: int | None = None,
                 clock: DeviceClock | None = None):
        self.device = device
        self.period = period or (CUDA_TIMING_PERIOD if device.type == "cuda" else 1)
        self.clock = clock or clock_for(device)
        self._plans = 0
        #: this step is timed
        self._measuring = True
        #: the host's clock, for the wall time between plans
        self._wall = time.perf_counter
        #: the mark at the end of the last proposal, if it was timed
        self._last_step_end: Any = None
        #: when the last plan was made (the wall time between plans)
        self._last_plan_time: float | None = None
        # the mark at the start of the draft pass under way, and its tokens
        self._pass_started: Any = None
        self._pass_tokens = 0
        self._timing_passes = False
        #: the pass under way is the first over a step with a prompt chunk
        self._first_pass_is_prefill = False
        #: the step of the proposal under way, and whether its plan is made
        #: (what is measured after it is the step's drafting; before it, the
        #: target phase of the last plan's cycle)
        self._step = 0
        self._planned = False
        #: timings not yet handed over, in the order measured
        self._entries: list[_Entry] = []

    def begin_step(self, step: int) -> None:
        """The proposal for the plan of ``step`` begins: what follows, until
        the plan, is the target phase of the last plan's cycle."""
        self._step, self._planned = step, False

    def _entry(self, **fields) -> None:
        if self._planned:
            self._entries.append(_Entry(self._step, True, **fields))
        else:
            self._entries.append(_Entry(self._step - 1, False, **fields))

    def _add(self, timing: Timing) -> None:
        self._entry(timing=timing)

    def _add_interval(self, start: Any, end: Any, build: Callable[[float], Timing]) -> None:
        self._entry(start=start, end=end, build=build)

    def take(self, through: int | None = None) -> tuple[CycleTimings, ...]:
        """Before the plan: the timings of every cycle planned at or before
        ``through`` (default: the last plan's) whose marks the device has
        reached, oldest first; the rest wait for a later ``take``."""
        self._planned = True
        through = self._step - 1 if through is None else through
        clock = self.clock
        for entry in self._entries:
            if entry.timing is None:
                # marks are reached in the order they were queued
                if not clock.ready(entry.end):
                    break
                entry.timing = entry.build(clock.seconds(entry.start, entry.end))
        cycles, taken = [], 0
        while taken < len(self._entries) and self._entries[taken].cycle <= through:
            cycle = self._entries[taken].cycle
            end = taken
            while end < len(self._entries) and self._entries[end].cycle == cycle:
                end += 1
            group = self._entries[taken:end]
            if any(e.timing is None for e in group):
                break
            cycles.append(CycleTimings(tuple(e.timing for e in group if e.drafting),
                                       tuple(e.timing for e in group if not e.drafting),
                                       cycle))
            taken = end
        del self._entries[:taken]
        return tuple(cycles)

    def passes_run(self, num_passes: int) -> None:
        """The step's draft ended after ``num_passes`` passes."""
        self._add(PassesRun(num_passes))

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
        now = self._wall()
        if self._last_plan_time is not None:
            self._add(CycleWallTime(now - self._last_plan_time))
        if decode_only and self._last_step_end is not None:
            self._add_interval(self._last_step_end, self.clock.mark(), functools.partial(
                _target_step, num_scheduled_tokens, num_reqs))
        self._last_plan_time = now if self._measuring else None
        self._last_step_end = None

    def on_step_end(self) -> None:
        """The proposal is done: the next target step starts now."""
        self._last_step_end = self.clock.mark() if self._measuring else None

    def time_catch_up(self, run) -> int:
        """Run a catch-up (``run()`` returns its tokens) and report its time."""
        if not self._measuring:
            return run()
        started = self.clock.mark()
        num_tokens = run()
        self._add_interval(started, self.clock.mark(),
                           functools.partial(CatchUpPassTiming, num_tokens))
        return num_tokens

    def start_passes(self, first_pass_tokens: int, first_pass_is_prefill: bool) -> None:
        """The draft passes of this step start now; the first runs over
        ``first_pass_tokens`` tokens."""
        if not self._measuring:
            return
        self._pass_tokens = first_pass_tokens
        self._first_pass_is_prefill = first_pass_is_prefill
        self._pass_started = self.clock.mark()
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
        now = self.clock.mark()
        if self._first_pass_is_prefill:
            build = functools.partial(CatchUpPassTiming, self._pass_tokens)
            self._first_pass_is_prefill = False
        else:
            build = functools.partial(_draft_pass, self._pass_tokens, num_reqs)
        self._add_interval(self._pass_started, now, build)
        self._pass_started, self._pass_tokens = now, num_reqs


def _target_step(num_scheduled_tokens: int, num_reqs: int, seconds: float) -> Timing:
    return TargetStepTiming(num_scheduled_tokens, seconds, num_reqs)


def _draft_pass(num_tokens: int, num_reqs: int, seconds: float) -> Timing:
    return DraftPassTiming(num_tokens, seconds, num_reqs)
