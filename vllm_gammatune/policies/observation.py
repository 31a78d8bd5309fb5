"""What a policy learns from the engine: one ``StepObservation`` a step.

The drafter hands its policy one observation per step, before the plan
(``DraftLengthPolicy.observe_step``). It holds:

- the verifications that reached the host since the last one, each naming
  the step whose draft it verified (``Verification.step``), so how late a
  verification arrives is data: the host path reads a draft's verification
  before the next plan (one step after its draft), the CUDA hot path with
  the drafts of that plan (two steps after it, ``docs/cuda.md``);
- the timings of the cycles measured whole since (``CycleTimings``), for a
  policy that plans from measured costs: what a step's drafting cost
  (catch-ups, draft passes, the passes it ran), then what the engine
  measured before the next plan (the wall time between the plans, the
  target step, a lookup), each cycle tagged with the step of its plan (a
  device's timings are read as late as its verifications:
  ``drafter/step_timing.py``).

A cost observer applies them in the order they happened: the drafting,
then the verifications, then the target step
(``policies.contracts.CostObserver``).

Pure Python; the vocabulary is vLLM's (``num_draft_tokens``,
``num_accepted_tokens``, ``num_reqs``, ``num_scheduled_tokens``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class DraftSource(enum.Enum):
    """Where a verified draft came from."""

    #: the drafter's own proposal (the draft model's, or the n-gram drafter's)
    MODEL = "model"
    #: a free draft verified ahead of the draft model (the n-gram lookup of
    #: ``ngram+draft_model``), or such an offer scored against the tokens the
    #: target emitted in its place
    FREE = "free"


@dataclass(frozen=True, slots=True)
class TokenVerdicts:
    """A draft verified token by token (AdaSD, Algorithm 1 lines 12-16)."""

    #: d_JS of every accepted draft token (matching or relaxed), line 16
    accepted_distances: tuple[float, ...]
    #: (H(q_i) in bits, d_JS(p_i || q_i)) of the first rejected draft token
    #: (lines 12-13); None when every drafted token was accepted
    rejected: tuple[float, float] | None


@dataclass(frozen=True, slots=True)
class Verification:
    """One request's draft, as the target verified it."""

    req_id: str
    #: the step whose plan made the draft (``StepObservation.step`` counts
    #: the same steps)
    step: int
    num_draft_tokens: int
    num_accepted_tokens: int
    #: requests in the step that verified it (vLLM's ``num_reqs``)
    num_reqs: int = 1
    source: DraftSource = DraftSource.MODEL
    #: token by token, where the verification was AdaSD's; else None
    verdicts: TokenVerdicts | None = None

    def __post_init__(self):
        if not 0 <= self.num_accepted_tokens <= self.num_draft_tokens:
            raise ValueError(
                "need 0 <= num_accepted_tokens <= num_draft_tokens, got "
                f"{self.num_accepted_tokens} accepted of {self.num_draft_tokens} drafted"
            )


# -- timings (seconds, measured by the drafter) ------------------------------------
@dataclass(frozen=True, slots=True)
class TargetStepTiming:
    """One target step over ``num_scheduled_tokens`` tokens."""

    num_scheduled_tokens: int
    seconds: float
    num_reqs: int = 1


@dataclass(frozen=True, slots=True)
class DraftPassTiming:
    """One decode-regime draft pass over ``num_tokens`` tokens (a lookup:
    the step's one pass)."""

    num_tokens: int
    seconds: float
    num_reqs: int = 1


@dataclass(frozen=True, slots=True)
class CatchUpPassTiming:
    """One prefill-like draft pass (a catch-up, or the first pass over a
    prompt chunk) over ``num_tokens`` tokens."""

    num_tokens: int
    seconds: float


@dataclass(frozen=True, slots=True)
class PassesRun:
    """The step's draft ended after ``num_passes`` passes (a per-token stop
    may end it before or after the plan's last pass); reported every step
    that drafted, timed or not."""

    num_passes: int


@dataclass(frozen=True, slots=True)
class CycleWallTime:
    """The wall time from the last plan to this one."""

    seconds: float


Timing = TargetStepTiming | DraftPassTiming | CatchUpPassTiming | PassesRun | CycleWallTime


@dataclass(frozen=True, slots=True)
class CycleTimings:
    """One cycle's timings (the draft work planned at ``step`` and the
    target step that verified it), each phase in the order measured."""

    #: while the step drafted: its catch-ups and draft passes, then the
    #: passes it ran
    drafting: tuple[Timing, ...] = ()
    #: after its verification: the wall time to the next plan, the target
    #: step, and a lookup timed before the next plan
    target: tuple[Timing, ...] = ()
    #: the step whose plan opened the cycle; None: the last plan's
    step: int | None = None

    def __bool__(self) -> bool:
        return bool(self.drafting or self.target)


@dataclass(frozen=True, slots=True)
class StepObservation:
    """Everything a policy learns before one plan."""

    #: the step about to be planned
    step: int
    verifications: tuple[Verification, ...] = ()
    #: the cycles measured whole since the last observation, oldest first
    cycles: tuple[CycleTimings, ...] = ()

    def lag(self, verification: Verification) -> int:
        """Steps between a verified draft's plan and this one (1 where the
        verification arrives before the next plan)."""
        return self.step - verification.step
