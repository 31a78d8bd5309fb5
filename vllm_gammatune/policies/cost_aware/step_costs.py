"""The policy's costs: its fits of the target step, the draft pass and the
catch-up pass (``linear_costs``), which each measured timing feeds, and the
costs of one step they give.

The target step and the draft's decode pass are fitted around the batch size
(``BatchLocalLinearCost``). A catch-up is priced by its own fit
(``catch_up_line``): catch-up passes run over many positions per request,
like a prefill, where a token costs far more than the decode fit's slope
says (a decode pass is flat in its few tokens; ``docs/cost-aware.md``,
"Costs, measured online"). The draft's passes over
prompt chunks feed the same fit. Given fixed costs (``FixedLinearCost``),
the draft's stands in for the catch-up's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vllm_gammatune.policies.cost_aware.linear_costs import (
    BatchLocalLinearCost,
    FixedLinearCost,
)
from vllm_gammatune.policies.observation import (
    CatchUpPassTiming,
    CycleWallTime,
    DraftPassTiming,
    TargetStepTiming,
    Timing,
)


@dataclass(frozen=True)
class StepCosts:
    """The model's costs of one step (seconds), around its batch size."""

    target_now: float  # the target step without draft tokens
    per_token: float  # one more draft token (verification + next first pass)
    first_pass: float  # the draft's pass over the step's target tokens
    later_pass: float  # each further draft pass (one token per request)
    catch_up_base: float
    catch_up_per_token: float


class CostFits:
    """The target, draft and catch-up fits, fed by the proposer's timings.

    Args:
        target_cost, draft_cost: fixed costs instead of measured ones.
    """

    def __init__(self, target_cost: FixedLinearCost | None = None,
                 draft_cost: FixedLinearCost | None = None):
        self.target = target_cost or BatchLocalLinearCost()
        self.draft = draft_cost or BatchLocalLinearCost()
        #: Timed around the forward alone, catch-up passes hold no idle gap:
        #: none is dropped as an outlier (a catch-up far larger than any
        #: before is exactly the sample the fit needs).
        self.catch_up = (BatchLocalLinearCost(locality=0.0, drop_outliers=False)
                         if draft_cost is None else draft_cost)
        #: the last wall time from one plan to the next (traces); None before one
        self.last_cycle_seconds: float | None = None

    def without_catch_ups(self) -> None:
        """The drafter keeps no draft KV cache (an n-gram lookup): nothing
        is ever caught up, and a catch-up costs nothing."""
        self.catch_up = FixedLinearCost(0.0, 0.0)

    @property
    def ready(self) -> bool:
        """Both the target and the draft fit have their samples."""
        return self.target.ready and self.draft.ready

    def feed(self, timings: Sequence[Timing]) -> None:
        """Each timing to its fit, in the order measured: a fit learns from
        every timing, whenever it arrives. The wall time from one plan to the
        next is kept for the trace (``last_cycle_seconds``)."""
        for timing in timings:
            if isinstance(timing, TargetStepTiming):
                self.target.add(timing.num_scheduled_tokens, timing.seconds, timing.num_reqs)
            elif isinstance(timing, DraftPassTiming):
                self.draft.add(timing.num_tokens, timing.seconds, timing.num_reqs)
            elif isinstance(timing, CatchUpPassTiming):
                self.catch_up.add(timing.num_tokens, timing.seconds)
            elif isinstance(timing, CycleWallTime):
                self.last_cycle_seconds = timing.seconds

    def catch_up_line(self, num_reqs: int) -> tuple[float, float] | None:
        """(base, per token) seconds of a catch-up pass: the catch-up fit
        once ready; before, its samples' seconds per token with no base
        (proportional: a line through one or two passes would extrapolate a
        pass of a few hundred tokens to thousands at a decode pass's slope);
        None before any catch-up or prompt pass of the draft was timed, which
        is brief: the warm-up's prompt pass is a sample, and if it was too
        short to be one, the next prompt chunk drafts to be one
        (``catch_ups.price_plan``). While it is None, the decode draft
        line stands in."""
        fit = self.catch_up
        if fit.ready:
            return fit.coefficients(num_reqs)
        rate = fit.seconds_per_token()
        return None if rate is None else (0.0, rate)

    def at(self, num_scheduled_tokens: int, num_reqs: int) -> StepCosts:
        """The costs of a step of ``num_reqs`` requests whose target
        processes ``num_scheduled_tokens`` (0: one per request)."""
        scheduled = num_scheduled_tokens or num_reqs
        t_base, t_slope = self.target.coefficients(num_reqs)
        d_base, d_slope = self.draft.coefficients(num_reqs)
        c_base, c_slope = (self.catch_up_line(num_reqs)
                           or self.draft.coefficients(num_reqs))
        return StepCosts(
            target_now=t_base + t_slope * num_reqs,
            # one more draft token: one more verified position now, one more
            # token in the draft's first pass of the next step
            per_token=t_slope + d_slope,
            first_pass=d_base + d_slope * (scheduled + num_reqs),
            later_pass=d_base + d_slope * num_reqs,
            catch_up_base=c_base, catch_up_per_token=c_slope)

    def coefficients(self, num_reqs: int) -> tuple[float, float, float, float]:
        """(target step, target per token, draft pass, draft per token)
        around ``num_reqs``: the coefficients ``fixed_step_costs`` takes."""
        return (*self.target.coefficients(num_reqs), *self.draft.coefficients(num_reqs))
