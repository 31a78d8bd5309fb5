"""The cost-aware policy's check of its own predictions against the clock.

The policy predicts, for the plan it chooses, the tokens the step will emit
and its seconds (``planner``); its models' errors are as large as what
drafting gains where the batch makes it marginal. This module measures every
*cycle* (the draft work planned at one step, the target step that verifies
it, the tokens that step emits) and compares it with the prediction:

    efficiency(kind) = (realized tokens / realized seconds)
                       / (predicted tokens / predicted seconds)

as ratios of decayed sums over the cycles of one batch size, separately for
cycles that drafted and cycles that did not. ``drafting_scale`` is
efficiency(drafted) / efficiency(skipped): how much better (> 1) or worse
(< 1) drafting does than the model says, relative to the model's error on
plain decode steps. The policy multiplies a drafted plan's predicted tokens
per second by it before comparing with not drafting, so a model that
flatters drafting is corrected by measurement, with nothing to tune.

The prediction is of what ran. Where the per-token stop (``token_stop``)
drafts another length than the plan's, the policy revises the prediction to
the passes run (``on_draft_passes_run``), the lengths drafted and the rule's
own estimate of the tokens they yield (the survivals of the tokens kept),
and counts that estimate as the draft's accepted tokens too: the rule's
token model is calibrated against verification on its own
(``token_acceptance``), so what is left to check here is the clock against
the costs, without the noise of acceptance.

A cycle's seconds are the wall time from its plan to the next plan when
reported (``on_wall_time``), so vLLM's work around the draft passes is
charged too; otherwise the sum of its timed parts. A cycle counts only when
measured whole: its target step timed at the same batch size, every planned
draft pass timed, and at most ``OUTLIER_FACTOR`` times its prediction (not
an idle gap), catch-up passes not counted (timed around the forward alone,
they hold no gap). Each open cycle is keyed by its plan's step, and closed
once its verification and timings have all arrived
(``StepObservation.verified_through``): at the next plan on the host path,
one later on the CUDA hot path. Pure Python. Why it checks what ran:
``docs/cost-aware.md``, "The model checked against the clock".
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_gammatune.policies.cost_aware.linear_costs import OUTLIER_FACTOR


@dataclass
class _Sums:
    """Decayed sums over the measured cycles of one kind at one batch size."""

    realized_tokens: float = 0.0
    realized_seconds: float = 0.0
    predicted_tokens: float = 0.0
    predicted_seconds: float = 0.0
    #: cycles measured (not decayed): the evidence behind the ratio
    count: int = 0

    def efficiency(self) -> float:
        if min(self.realized_seconds, self.predicted_tokens) <= 0.0:
            return 1.0
        realized = self.realized_tokens / self.realized_seconds
        predicted = self.predicted_tokens / self.predicted_seconds
        return realized / predicted


@dataclass(frozen=True)
class MeasuredCycle:
    """A cycle measured whole: the tokens it emitted (a ruled draft's as
    the rule expected them), the seconds it took."""

    tokens: float
    seconds: float


@dataclass
class _OpenCycle:
    num_reqs: int
    num_draft_passes: int
    predicted_tokens: float
    predicted_seconds: float
    seconds: float = 0.0
    #: the part of ``seconds`` spent in catch-up passes
    catch_up_seconds: float = 0.0
    draft_passes_timed: int = 0
    accepted_tokens: float = 0.0
    target_num_reqs: int | None = None
    #: wall time from this plan to the next, when reported
    wall_seconds: float | None = None


class CycleCheck:
    """Realized against predicted throughput, per batch size, drafted vs not.

    Args:
        memory: weight kept by older cycles of the same kind and batch size
            per new one.
        min_cycles: measured drafted cycles needed before the scale departs
            from 1 (and skipped ones before their own efficiency is used).
        scale_bounds: the scale is clamped to this interval.
    """

    def __init__(self, memory: float = 0.95, min_cycles: int = 4,
                 scale_bounds: tuple[float, float] = (0.25, 4.0)):
        if not 0.0 < memory < 1.0:
            raise ValueError(f"memory must be in (0, 1), got {memory}")
        self.memory = memory
        self.min_cycles = min_cycles
        self.scale_bounds = scale_bounds
        #: (batch size, drafted) -> sums
        self._sums: dict[tuple[int, bool], _Sums] = {}
        #: the step of its plan -> the cycle, until closed
        self._open: dict[int, _OpenCycle] = {}
        #: seconds of the cycle ``close`` last ended, whether or not it was
        #: measured whole (for traces; None: there was no open cycle)
        self.last_seconds: float | None = None

    # -- one cycle ----------------------------------------------------------
    def open(self, step: int, num_reqs: int, num_draft_passes: int,
             predicted_tokens: float, predicted_seconds: float) -> None:
        """The plan of ``step`` was made: ``num_draft_passes`` draft passes
        (0 = skipped) expected to emit ``predicted_tokens`` in
        ``predicted_seconds``."""
        self._open[step] = _OpenCycle(num_reqs, num_draft_passes, predicted_tokens,
                                      predicted_seconds)

    def revise(self, step: int, tokens: float, seconds: float) -> None:
        """Add to the prediction of the cycle of ``step``: the plan's lengths
        were changed while drafting (the per-token stop), and the check
        compares what ran with the model's prediction of what ran."""
        cycle = self._open.get(step)
        if cycle is not None:
            cycle.predicted_tokens += tokens
            cycle.predicted_seconds += seconds

    def on_draft_pass(self, step: int, seconds: float) -> None:
        cycle = self._open.get(step)
        if cycle is not None:
            cycle.seconds += seconds
            cycle.draft_passes_timed += 1

    def on_draft_passes_run(self, step: int, num_draft_passes: int,
                            seconds_per_pass: float = 0.0) -> None:
        """The cycle's draft ended after ``num_draft_passes`` passes (a
        per-token stop may end it before or after the plan's last pass); its
        prediction counts those passes at ``seconds_per_pass`` each instead
        of the plan's."""
        cycle = self._open.get(step)
        if cycle is not None and cycle.num_draft_passes > 0:
            extra = num_draft_passes - cycle.num_draft_passes
            cycle.predicted_seconds += extra * seconds_per_pass
            cycle.num_draft_passes = num_draft_passes

    def on_catch_up_pass(self, step: int, seconds: float) -> None:
        cycle = self._open.get(step)
        if cycle is not None:
            cycle.seconds += seconds
            cycle.catch_up_seconds += seconds

    def on_wall_time(self, step: int, seconds: float) -> None:
        """The wall time from the cycle's plan to the next plan."""
        cycle = self._open.get(step)
        if cycle is not None:
            cycle.wall_seconds = seconds

    def on_accepted(self, step: int, num_accepted_tokens: float) -> None:
        cycle = self._open.get(step)
        if cycle is not None:
            cycle.accepted_tokens += num_accepted_tokens

    def on_target_step(self, step: int, seconds: float, num_reqs: int) -> None:
        cycle = self._open.get(step)
        if cycle is not None and cycle.target_num_reqs is None:
            cycle.seconds += seconds
            cycle.target_num_reqs = num_reqs

    def close_through(self, step: int) -> list[tuple[int, MeasuredCycle | None]]:
        """End every open cycle planned at or before ``step`` (whose
        verification and timings have all arrived), oldest first: each
        with what it measured if it was measured whole (and recorded),
        else None."""
        due = sorted(s for s in self._open if s <= step)
        self.last_seconds = None
        return [(s, self._close(self._open.pop(s))) for s in due]

    def _close(self, cycle: _OpenCycle) -> MeasuredCycle | None:
        seconds = cycle.seconds if cycle.wall_seconds is None else cycle.wall_seconds
        self.last_seconds = seconds
        if (cycle.target_num_reqs != cycle.num_reqs
                or cycle.draft_passes_timed != cycle.num_draft_passes
                or cycle.predicted_seconds <= 0.0
                or seconds - cycle.catch_up_seconds
                > OUTLIER_FACTOR * cycle.predicted_seconds):
            return None
        sums = self._sums.setdefault((cycle.num_reqs, cycle.num_draft_passes > 0), _Sums())
        m = self.memory
        sums.realized_tokens = m * sums.realized_tokens + cycle.num_reqs + cycle.accepted_tokens
        sums.realized_seconds = m * sums.realized_seconds + seconds
        sums.predicted_tokens = m * sums.predicted_tokens + cycle.predicted_tokens
        sums.predicted_seconds = m * sums.predicted_seconds + cycle.predicted_seconds
        sums.count += 1
        return MeasuredCycle(tokens=cycle.num_reqs + cycle.accepted_tokens,
                             seconds=seconds)

    # -- what the policy reads ------------------------------------------------
    def efficiency(self, num_reqs: int, drafted: bool) -> float:
        sums = self._sums.get((num_reqs, drafted))
        return 1.0 if sums is None else sums.efficiency()

    def num_cycles(self, num_reqs: int, drafted: bool) -> int:
        sums = self._sums.get((num_reqs, drafted))
        return 0 if sums is None else sums.count

    def is_informed(self, num_reqs: int) -> bool:
        """True once drafted cycles have ``min_cycles`` measured cycles here."""
        return self.num_cycles(num_reqs, True) >= self.min_cycles

    def drafting_scale(self, num_reqs: int) -> float:
        """efficiency(drafted) / efficiency(skipped) at this batch size, 1.0
        until drafted cycles have ``min_cycles`` measured cycles; until
        skipped ones have as many, their efficiency is taken as 1 (a skipped
        cycle's prediction is the target fit, measured on those very steps,
        so its efficiency is close to 1). Without that stand-in a batch size
        where the policy always drafts never measures a skipped cycle, and
        the model alone would decide there."""
        if not self.is_informed(num_reqs):
            return 1.0
        skipped = (self.efficiency(num_reqs, False)
                   if self.num_cycles(num_reqs, False) >= self.min_cycles else 1.0)
        scale = self.efficiency(num_reqs, True) / skipped
        low, high = self.scale_bounds
        return min(high, max(low, scale))
