"""The record of what one step's plan decided and why, for traces.

``plan_batch`` keeps what it chose (``_decide``); the ``StepDecision`` is
built from it only when read (``last_decision``): the proposer reads it only
when a trace is written, and building it on every step costs about a tenth
of the plan's time. It is read before the next plan: the catch-up price,
the shares and the drafting scale it reports are read at that time, and
nothing changes them between a plan and the next.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepDecision:
    """What one ``plan_batch`` decided and why (for traces and debugging).

    ``kind``: "warmup" (costs not measured yet), "skip" (no request drafts),
    "draft" (drafting for its own sake, probes may join), "probe" (only
    probes draft) or "price" (a prompt chunk drafted to price catch-ups).
    ``predicted_tokens`` / ``predicted_seconds``: the model's
    expectation of the chosen plan, before the measured correction
    ``drafting_scale`` (1.0 while ``informed`` is False: fewer than
    ``CycleCheck.min_cycles`` drafted cycles measured at this batch size).
    ``catch_up_tokens``: the missed positions of the requests that draft;
    ``catch_up_seconds_per_token``: the price of one (``catch_up_line``'s
    slope, None while no catch-up or prompt pass of the draft was timed);
    ``drafting_share``: the policy's share of recent steps that drafted.
    ``measured_tokens`` / ``measured_seconds``: the previous plan's cycle as
    the clock measured it (None if it was not measured whole);
    ``previous_cycle_seconds``: its seconds even when it was not (a batch
    change, a prefill chunk or more than ``OUTLIER_FACTOR`` times the
    prediction left it out of the check).
    ``step_costs``: the cost fits around this batch size, in seconds:
    (target step, target per token, draft pass, draft per token), the
    coefficients ``fixed_step_costs`` takes.
    """

    batch_size: int
    num_scheduled_tokens: int
    has_prefill: bool
    kind: str
    num_draft_tokens: int
    max_num_draft_tokens: int
    num_probes: int
    catch_up_tokens: int
    catch_up_seconds_per_token: float | None
    drafting_share: float
    predicted_tokens: float
    predicted_seconds: float
    drafting_scale: float
    informed: bool
    measured_tokens: int | None
    measured_seconds: float | None
    previous_cycle_seconds: float | None
    step_costs: tuple[float, float, float, float]


class DecisionRecord:
    """Keeps the last plan's choice; builds its ``StepDecision`` on demand.

    A part of ``CostAwarePolicy``: reads its catch-up price, drafting share
    and check against the clock.
    """

    #: what the last ``plan_batch`` chose, as ``_decide`` got it
    _last_step: tuple | None = None

    def _decide(self, kind, plan, probes, batch, tokens, seconds, measured) -> None:
        """Keep what ``plan_batch`` chose, for ``last_decision``."""
        self._last_step = (kind, plan, probes, batch, tokens, seconds, measured)

    @property
    def last_decision(self) -> StepDecision | None:
        """What the last ``plan_batch`` decided and why; read it before the
        next one."""
        if self._last_step is None:
            return None
        kind, plan, probes, batch, tokens, seconds, measured = self._last_step
        num_reqs = len(plan)
        catch_up = list(batch.catch_up_tokens) or [0] * num_reqs
        check = self.cycle_check
        return StepDecision(
            batch_size=num_reqs, num_scheduled_tokens=batch.num_scheduled_tokens,
            has_prefill=batch.has_prefill, kind=kind, num_draft_tokens=sum(plan),
            max_num_draft_tokens=max(plan, default=0), num_probes=sum(probes),
            catch_up_tokens=sum(m for k, m in zip(plan, catch_up) if k),
            catch_up_seconds_per_token=(None if (line := self.catch_up_line(num_reqs)) is None
                                        else line[1]),
            drafting_share=self.drafting_share,
            predicted_tokens=tokens, predicted_seconds=seconds,
            drafting_scale=1.0 if check is None else check.drafting_scale(num_reqs),
            informed=check is not None and check.is_informed(num_reqs),
            measured_tokens=None if measured is None else measured.tokens,
            measured_seconds=None if measured is None else measured.seconds,
            previous_cycle_seconds=None if check is None else check.last_seconds,
            step_costs=(*self.target_cost.coefficients(num_reqs),
                        *self.draft_cost.coefficients(num_reqs)))
