"""The record of what one step's plan decided and why, for traces.

``plan_batch`` keeps what it chose (``PlannedStep``); the ``StepDecision``
is built from it only when read (``last_decision``): the proposer reads it
only when a trace is written, and building it on every step would add to
every plan's time for nothing. It is read before the next plan: the catch-up
price, the drafting share (``DraftingShare``) and the cycle's wall time it
reports are read at that time, and nothing changes them between a plan and
the next.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_gammatune.policies.base import BatchView

#: weight kept per step by the share of steps that drafted for their own
#: sake (a window of about 50 steps)
_DRAFTING_SHARE_MEMORY = 0.98


@dataclass(frozen=True)
class StepDecision:
    """What one ``plan_batch`` decided and why (for traces and debugging).

    ``kind``: "warmup" (costs not measured yet), "skip" (no request drafts),
    "draft" (drafting for its own sake, probes may join), "probe" (only
    probes draft) or "price" (a prompt chunk drafted to price catch-ups).
    ``predicted_tokens`` / ``predicted_seconds``: the model's
    expectation of the chosen plan.
    ``catch_up_tokens``: the missed positions of the requests that draft;
    ``catch_up_seconds_per_token``: the price of one (``catch_up_line``'s
    slope, None while no catch-up or prompt pass of the draft was timed);
    ``drafting_share``: the policy's share of recent steps that drafted.
    ``previous_cycle_seconds``: the wall time from the previous plan to this
    one (None before one was measured).
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
    previous_cycle_seconds: float | None
    step_costs: tuple[float, float, float, float]


@dataclass(frozen=True)
class PlannedStep:
    """What one ``plan_batch`` chose, kept until its ``StepDecision`` is read."""

    kind: str
    #: [num_reqs] the lengths planned, probes included
    lengths: list[int]
    #: [num_reqs] which requests probe
    probes: list[bool]
    batch: BatchView
    predicted_tokens: float
    predicted_seconds: float

    def decision(self, *, catch_up_seconds_per_token: float | None, drafting_share: float,
                 previous_cycle_seconds: float | None,
                 step_costs: tuple[float, float, float, float]) -> StepDecision:
        """The step's ``StepDecision``, with what the policy's parts report
        now (read before the next plan, nothing has changed them)."""
        num_reqs = len(self.lengths)
        batch = self.batch
        return StepDecision(
            batch_size=num_reqs, num_scheduled_tokens=batch.num_scheduled_tokens,
            has_prefill=batch.has_prefill, kind=self.kind,
            num_draft_tokens=sum(self.lengths),
            max_num_draft_tokens=max(self.lengths, default=0),
            num_probes=sum(self.probes),
            catch_up_tokens=sum(m for k, m in zip(self.lengths, batch.catch_up_tokens) if k),
            catch_up_seconds_per_token=catch_up_seconds_per_token,
            drafting_share=drafting_share,
            predicted_tokens=self.predicted_tokens,
            predicted_seconds=self.predicted_seconds,
            previous_cycle_seconds=previous_cycle_seconds, step_costs=step_costs)


class DraftingShare:
    """The decayed share of recent steps that drafted for their own sake
    (warm-up included, probes not), reported in traces."""

    def __init__(self):
        self.share = 1.0

    def count(self, plan: list[int]) -> None:
        """A step was planned with ``plan`` (before its probes)."""
        m = _DRAFTING_SHARE_MEMORY
        self.share = m * self.share + (1.0 - m) * (max(plan, default=0) > 0)
