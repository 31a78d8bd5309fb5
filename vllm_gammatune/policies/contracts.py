"""The narrow contracts a policy may add to planning, each recognised by type.

A policy is a planner (``policies.base.DraftLengthPolicy``). The drafter
asks for more only of a policy that is also one of these:

- ``ThresholdStop``: a request's draft ends after the first token whose
  top probability is below, or whose entropy is above, the request's
  threshold (``ConfidenceStop``: GammaTune+, AssistantThreshold; AdaSD's
  T_G); the drafter applies it on the device;
- ``TokenRule``: after each draft pass the policy reads the draft's
  probability of every request's new token and says which drafts go on
  (``gammatune_cost``'s per-token stop);
- ``CostObserver``: the policy plans from the step costs the drafter
  measures, and may plan 0 for every request of a step (the drafter then
  skips the draft model and catches it up later);
- ``FreeDraftPlanner``: per request, a free draft (an n-gram lookup's) or
  the draft model's (drafter ``ngram+draft_model``);
- ``RelaxedVerifier``: the policy is verified token by token at vLLM's
  rejection sampler and may accept a draft token the target would not
  have emitted (AdaSD; lossy);
- ``ExplainsSteps``: what the last plan decided, for traces and metrics.

Pure Python; no vLLM or torch import.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vllm_gammatune.policies.base import BatchView
from vllm_gammatune.policies.observation import Timing, Verification

#: what ``ThresholdStop.stop_measure`` may name
STOP_ON_CONFIDENCE = "confidence"
STOP_ON_ENTROPY = "entropy"


class ThresholdStop(ABC):
    """A per-request threshold on each draft token, applied on the device."""

    @property
    @abstractmethod
    def stop_measure(self) -> str | None:
        """What the threshold is compared with: ``"confidence"`` (stop after
        a token whose top probability is below it), ``"entropy"`` (after a
        token whose entropy in bits is above it), or None (this instance
        has no stop)."""

    @abstractmethod
    def stop_threshold(self, state: Any) -> float:
        """This request's threshold (read at each plan)."""


class ConfidenceStop(ThresholdStop):
    """A stop on the draft's top probability at one threshold for every
    request (``confidence_threshold``; None: no stop)."""

    confidence_threshold: float | None = None

    @property
    def stop_measure(self) -> str | None:
        return None if self.confidence_threshold is None else STOP_ON_CONFIDENCE

    def stop_threshold(self, state: Any) -> float:
        assert self.confidence_threshold is not None
        return self.confidence_threshold


class TokenRule(ABC):
    """Decides after each draft pass which drafts go on."""

    @abstractmethod
    def draft_on(self, states: list[Any], position: int, token_probs: Sequence[float],
                 active: Sequence[bool]) -> list[int | None]:
        """After draft pass ``position`` (1-based): [num_reqs] None to draft
        on (up to its plan), or the length the draft ends at (``position``,
        or ``position - 1`` to leave the new token unverified).
        ``token_probs``: [num_reqs] the draft's probability of each
        request's token of this pass; ``active``: [num_reqs] which requests
        drafted in it."""


@dataclass(frozen=True)
class DrafterTraits:
    """How the drafter that serves a cost observer drafts."""

    #: it runs every planned draft pass (no early exit) and keeps every
    #: token they produce, so a per-token stop decides nothing (the CUDA
    #: hot path, ``docs/cuda.md``)
    runs_every_planned_pass: bool = False
    #: it keeps a draft KV cache that a skipped step leaves behind (an
    #: n-gram lookup has none, so nothing is ever caught up)
    keeps_draft_kv: bool = True


class CostObserver(ABC):
    """Plans from measured step costs, and may skip the draft model.

    Its plan depends on this process's clock, so with tensor parallelism
    every rank drafts what rank 0 planned; a step where it plans 0 for every
    request runs no draft pass, and the drafter catches the draft up before
    a request drafts again.
    """

    @abstractmethod
    def observe_costs(self, timings: Sequence[Timing]) -> None:
        """Learn from timings, in the order they were measured."""

    def adapt_to_drafter(self, traits: DrafterTraits) -> None:
        """Called once by a drafter that differs from the default
        (``DrafterTraits()``)."""

    def pads_skipped_step(self, num_reqs: int, num_draft_tokens: int) -> bool:
        """Whether a step of ``num_reqs`` requests where none drafts should
        still verify ``num_draft_tokens`` certain fillers per request (the
        step shape a GPU replays as a FULL graph; the fillers' verification
        keeps no token of theirs): only where that costs next to nothing."""
        return False


class FreeDraftPlanner(ABC):
    """Chooses per request between a free draft and the draft model's.

    Its free drafts' verifications arrive as ``Verification`` with
    ``source=DraftSource.FREE``."""

    @abstractmethod
    def free_draft_lengths(self, states: list[Any], offers: Sequence[int],
                           batch: BatchView) -> list[int]:
        """[num_reqs] the tokens of each request's free draft (``offers``:
        [num_reqs] tokens its lookup offers) to verify this step, 0 where
        the draft model drafts instead."""


class RelaxedVerifier(ABC):
    """Verified token by token at vLLM's rejection sampler (AdaSD).

    Its verifications arrive with ``Verification.verdicts``; the drafter
    keeps each draft token's entropy (and, where verification is relaxed,
    its distribution) until its verification.
    """

    @property
    @abstractmethod
    def relaxes_verification(self) -> bool:
        """A draft token the target would not have emitted may be accepted
        (``accepts_mismatch``; lossy); False: verification is vLLM's."""

    @abstractmethod
    def accepts_mismatch(self, state: Any, js_distance: float) -> bool:
        """Whether a draft token that differs from the target's is accepted,
        given the Jensen-Shannon distance of the two distributions there."""

    @abstractmethod
    def verification_threshold(self, state: Any) -> float:
        """The distance below which ``accepts_mismatch`` accepts (a metric)."""


class ExplainsSteps(ABC):
    """Explains its plans, for traces and metrics."""

    @property
    @abstractmethod
    def last_decision(self) -> Any:
        """What the last ``plan_batch`` decided and why (a dataclass the
        trace writes), or None before the first plan."""

    def verification_details(self, state: Any, verification: Verification) -> dict | None:
        """What the policy knew of the verified draft, for traces (read
        just before the verification is observed); None: nothing."""
        return None

