"""What reached the host for the next observation (the draft-model drafter).

On the host path the drafter reads the counts vLLM hands
``prepare_inputs_padded`` before it plans (``collect``); on the CUDA hot
path they stay on the device until the step's one read, with the drafts
(``read``), and reach the policy in the next step's observation. AdaSD's
policy learns from its verifier's verdicts instead of counts; the n-gram
front takes its free drafts' share of each verification. Each verification
is tagged with the step whose plan made the draft it verifies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from vllm_gammatune.drafter.observations import (
    PlanSteps,
    accepted_draft_tokens,
    count_verifications,
)
from vllm_gammatune.policies import Verification

if TYPE_CHECKING:
    from vllm_gammatune.drafter.ngram_front import NgramFront
    from vllm_gammatune.telemetry.metrics import StepCounters
    from vllm_gammatune.verify.adasd_verifier import AdaSDVerifier


class Unread(NamedTuple):
    """A verification still on the device (the hot path's), read with the
    step's drafts."""

    #: the step whose drafts it verifies
    step: int
    #: [num_reqs] draft tokens verified; None for AdaSD's verification
    num_draft_tokens: list[int] | None
    #: [num_reqs] accepted drafts + 1 (0 if discarded), on the device; None
    #: for AdaSD's, whose results the verifier keeps
    valid_counts: object | None


class VerificationInbox:
    """What reached the host for the next observation, and the count of
    plans it is tagged with (``steps``).

    Args:
        hot_path: verifications are read with the next step's drafts.
        verifier: AdaSD's verification, whose policy learns from its
            verdicts instead of counts; None for every other policy.
        front: the n-gram lookup ahead of the draft model, or None.
        on_arrival: called with the verifications by counts as they reach
            the host (the trace's lines).
    """

    def __init__(self, hot_path: bool, verifier: AdaSDVerifier | None = None,
                 front: NgramFront | None = None,
                 on_arrival: Callable[[list[Verification]], None] = lambda _: None):
        self._hot_path = hot_path
        self._verifier = verifier
        self._front = front
        self._on_arrival = on_arrival
        self.steps = PlanSteps()
        #: (step, [num_reqs] draft tokens, [num_reqs] valid sampled counts
        #: on the device) of the verification vLLM handed over, until read
        self._pending: tuple | None = None
        #: verifications read after the last plan (the hot path)
        self._arrived: list[Verification] = []

    def verified_through(self) -> int:
        """The newest plan whose verification the next observation holds or
        an earlier one held: the last plan's on the host path (read before
        this plan), the one before on the hot path (read with the last
        plan's drafts)."""
        return self.steps.next - (2 if self._hot_path else 1)

    def hand_over(self, num_draft_tokens: list[int], valid_counts) -> None:
        """vLLM's verification of the last drafts (``prepare_inputs_padded``)."""
        self._pending = (self.steps.drafted_at, num_draft_tokens, valid_counts)

    def collect(self, req_ids: Sequence[str], counters: StepCounters | None):
        """(the verifications for this step's observation; the one still on
        the device (``Unread``), or None; [num_reqs] the draft tokens each
        request had accepted, where the n-gram front needs them, or None).
        The host path reads the counts here."""
        arrived, self._arrived = self._arrived, []
        pending, self._pending = self._pending, None
        if self._verifier is not None:
            step = self.steps.drafted_at if pending is None else pending[0]
            if self._hot_path:
                return arrived, Unread(step, None, None), None
            return arrived + self._verifier.take_verifications(step), None, None
        if pending is None:
            return arrived, None, None
        if self._hot_path:
            return arrived, Unread(*pending), None
        step, num_draft_tokens, valid_counts = pending
        valid_counts = valid_counts.tolist()
        accepted = None
        if self._front is not None:
            accepted = [accepted_draft_tokens(d, v)
                        for d, v in zip(num_draft_tokens, valid_counts)]
            num_draft_tokens, free = self._front.teach(req_ids, num_draft_tokens,
                                                       valid_counts, counters, step)
            arrived += free
        counted = count_verifications(req_ids, num_draft_tokens, valid_counts, step)
        self._on_arrival(counted)
        return arrived + counted, None, accepted

    def read(self, req_ids: Sequence[str], unread: Unread, valid_counts: list[int] | None,
             extra: list) -> None:
        """The hot path's verification, read with the step's drafts
        (``valid_counts``: [num_reqs]; ``extra``: AdaSD's results): kept
        for the next observation."""
        if self._verifier is None:
            counted = count_verifications(req_ids, unread.num_draft_tokens, valid_counts,
                                          unread.step)
            self._on_arrival(counted)
            self._arrived += counted
        elif extra:
            self._arrived += self._verifier.read_verifications(extra, unread.step)
