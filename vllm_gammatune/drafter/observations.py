"""A step's observation, assembled by the drafter and handed to its policy.

After vLLM's rejection sampler, a request that had ``k`` draft tokens keeps
``accepted + 1`` sampled tokens (0 when its sampled token is discarded, a
prompt chunk). The drafter turns each such count into a ``Verification``
(``count_verifications``), adds what else reached the host (a free draft's,
AdaSD's token by token) and its timer's timings, and hands the policy one
``StepObservation`` before it plans (``deliver``). With a trace on, each
verification of the drafter's own draft by counts is written as a line when
it reaches the host (``trace_verifications``), with what the policy knew of
that draft then. Shared by both drafters.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from vllm_gammatune.drafter.request_records import RequestRecords
from vllm_gammatune.policies import (
    DraftLengthPolicy,
    DraftSource,
    ExplainsSteps,
    StepObservation,
    Verification,
)
from vllm_gammatune.policies.observation import CycleTimings
from vllm_gammatune.telemetry import trace


def accepted_draft_tokens(num_draft_tokens: int, num_valid: int) -> int:
    """The draft tokens a verification accepted: ``num_valid`` sampled tokens
    kept (accepted + 1; 0 if discarded) of ``num_draft_tokens`` verified."""
    return max(0, min(num_draft_tokens, num_valid - 1))


class PlanSteps:
    """The drafter's count of plans, which tags each verification with the
    plan whose draft it verifies (``Verification.step``)."""

    def __init__(self):
        #: the step the next plan is of, and the one the last plan was of
        #: (whose drafts the target verifies next)
        self.next = 0
        self.drafted_at = 0

    def planned(self) -> None:
        """A plan was made: its drafts are the next to be verified."""
        self.drafted_at, self.next = self.next, self.next + 1


def count_verifications(req_ids: Sequence[str], num_draft_tokens: Sequence[int],
                        valid_counts: Sequence[int], step: int) -> list[Verification]:
    """The verifications of one step, of drafts planned at ``step``.
    ``num_draft_tokens``: [num_reqs] draft tokens verified; ``valid_counts``:
    [num_reqs] accepted drafts + 1 (0 if discarded); both in the step's
    input batch order. A request without a draft, or whose sampled token is
    discarded, has none."""
    num_reqs = len(req_ids)
    # ``accepted_draft_tokens`` inline: once a request, every step
    return [Verification(req_id, step, drafted, min(drafted, num_valid - 1), num_reqs)
            for req_id, drafted, num_valid in zip(req_ids, num_draft_tokens, valid_counts)
            if drafted > 0 and num_valid > 0]


def deliver(policy: DraftLengthPolicy, records: RequestRecords, step: int,
            verifications: Iterable[Verification] = (),
            cycles: tuple[CycleTimings, ...] = ()) -> None:
    """Hand the policy the observation before the plan of ``step``
    (``StepObservation``). A verification of a request that has left (no
    record) is dropped."""
    states = records.policy_states
    observation = StepObservation(
        step, tuple(v for v in verifications if v.req_id in states), cycles)
    policy.observe_step(observation, states)


def trace_verifications(policy: DraftLengthPolicy, records: RequestRecords,
                        verifications: Iterable[Verification]) -> None:
    """With a trace on, one line per verification of the drafter's own
    draft by counts, written as it reaches the host (before the policy
    learns from it)."""
    if trace.writer() is None:  # VLLM_GAMMATUNE_TRACE only
        return
    for verification in verifications:
        if verification.source is DraftSource.MODEL and verification.verdicts is None:
            _trace_verification(policy, records, verification)


def _trace_verification(policy: DraftLengthPolicy, records: RequestRecords,
                        verification: Verification) -> None:
    req_id, drafted = verification.req_id, verification.num_draft_tokens
    details = {}
    probs = records.take_traced_token_probs(req_id)
    if probs is not None:
        details["token_probs"] = [round(q, 4) for q in probs[:drafted]]
    if isinstance(policy, ExplainsSteps):
        state = records.policy_state(req_id)
        details.update(policy.verification_details(state, verification) or {})
    trace.record(req_id, drafted, verification.num_accepted_tokens, details)

