"""What reached the host for the next observation (the draft-model drafter).

On the host path the drafter reads the counts vLLM hands
``prepare_inputs_padded`` before it plans (``collect``); on the CUDA hot
path they stay on the device until the step's one read, with the drafts
(``read``), and reach the policy in the next step's observation. The n-gram
front needs the step's sampled tokens before the plan on either path: there
the counts and the sampled tokens come in one read before the plan, and the
front takes its free drafts' share of each verification. AdaSD's policy
learns from its verifier's verdicts instead of counts. Each verification is
tagged with the step whose plan made the draft it verifies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import torch

from vllm_gammatune.drafter.hot_path import read_on_host
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


class Collected(NamedTuple):
    """What ``VerificationInbox.collect`` hands the step before its plan."""

    #: the verifications for this step's observation
    verifications: list[Verification]
    #: the verification still on the device (the hot path's), or None
    unread: Unread | None
    #: [num_reqs] draft tokens each request had accepted (the n-gram
    #: front's), or None
    accepted: list[int] | None
    #: [num_reqs] the token each request just sampled (the n-gram front's),
    #: or None
    next_token_ids: list[int] | None


class VerificationInbox:
    """What reached the host for the next observation, and the count of
    plans it is tagged with (``steps``).

    Args:
        hot_path: verifications are read with the next step's drafts, but
            where the n-gram front reads them before the plan.
        verifier: AdaSD's verification, whose policy learns from its
            verdicts instead of counts; None for every other policy.
        front: the n-gram lookup ahead of the draft model, or None.
        on_arrival: called with the verifications by counts as they reach
            the host (the trace's lines).
    """

    def __init__(self, hot_path: bool, verifier: AdaSDVerifier | None = None,
                 front: NgramFront | None = None,
                 on_arrival: Callable[[list[Verification]], None] = lambda _: None):
        #: the verification is read with the step's drafts
        self._read_with_drafts = hot_path and front is None
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
        return self.steps.next - (2 if self._read_with_drafts else 1)

    def hand_over(self, num_draft_tokens: list[int], valid_counts) -> None:
        """vLLM's verification of the last drafts (``prepare_inputs_padded``)."""
        self._pending = (self.steps.drafted_at, num_draft_tokens, valid_counts)

    def collect(self, req_ids: Sequence[str], counters: StepCounters | None,
                next_token_ids: torch.Tensor | None = None) -> Collected:
        """What reached the host before this step's plan (``Collected``).
        The host path reads the counts here; with the n-gram front, in the
        same read as ``next_token_ids`` ([num_reqs] on the device: the token
        each request just sampled, this step's one read on the hot path)."""
        arrived, self._arrived = self._arrived, []
        pending, self._pending = self._pending, None
        if self._verifier is not None:
            step = self.steps.drafted_at if pending is None else pending[0]
            if self._read_with_drafts:
                return Collected(arrived, Unread(step, None, None), None, None)
            return Collected(arrived + self._verifier.take_verifications(step), None, None,
                             None)
        if self._front is not None:
            return self._collect_for_front(req_ids, counters, arrived, pending, next_token_ids)
        if pending is None:
            return Collected(arrived, None, None, None)
        if self._read_with_drafts:
            return Collected(arrived, Unread(*pending), None, None)
        step, num_draft_tokens, valid_counts = pending
        counted = count_verifications(req_ids, num_draft_tokens, valid_counts.tolist(), step)
        self._on_arrival(counted)
        return Collected(arrived + counted, None, None, None)

    def _collect_for_front(self, req_ids: Sequence[str], counters: StepCounters | None,
                           arrived: list[Verification], pending,
                           next_token_ids: torch.Tensor) -> Collected:
        """``collect`` with the n-gram front: the counts and the sampled
        tokens in one read; the free drafts' verifications apart."""
        num_reqs = len(req_ids)
        counts = [] if pending is None else [pending[2][:num_reqs].long()]
        # [num_reqs (counts, if pending) + num_reqs (sampled tokens)]
        values = read_on_host(torch.cat(counts + [next_token_ids[:num_reqs].long()]))
        sampled = values[-num_reqs:] if num_reqs else []
        if pending is None:
            return Collected(arrived, None, None, sampled)
        step, num_draft_tokens, _ = pending
        valid_counts = values[:num_reqs]
        accepted = [accepted_draft_tokens(d, v) for d, v in zip(num_draft_tokens, valid_counts)]
        num_draft_tokens, free = self._front.teach(req_ids, num_draft_tokens, valid_counts,
                                                   counters, step)
        counted = count_verifications(req_ids, num_draft_tokens, valid_counts, step)
        self._on_arrival(counted)
        return Collected(arrived + free + counted, None, accepted, sampled)

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
