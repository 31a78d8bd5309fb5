"""A request's state under the cost-aware policy: one typed record per part.

Each record is written by the one part named beside it, and read by the
planner; no part writes another's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: drafts a request keeps for the verifications still to come: a draft is
#: verified before the next plan on the host path and before the plan after
#: next on the CUDA hot path; a further step of lag (async scheduling) fits
_DRAFTS_KEPT = 4


@dataclass(slots=True)
class SourceCounts:
    """Decayed acceptance counts of one draft source (``acceptance_rates``)."""

    #: decayed count of accepted draft tokens
    accepted: float = 0.0
    #: decayed count of verifications that ended in a rejected draft token
    rejections: float = 0.0


@dataclass(slots=True)
class ProbeRecord:
    """Probing (``probe_scheduler``)."""

    #: steps since this request last drafted
    steps_since_draft: int = 0
    #: steps without drafting after which it probes: a new request's first
    #: probe, and at batch 1 the one after a probe the target accepted, are
    #: due at once, later ones at the scheduler's base interval
    probe_interval: int = 1
    #: True while the last draft was a probe the target has not accepted
    probing: bool = False


@dataclass(slots=True)
class TokenDraft:
    """A request's draft of one step, as the per-token stop sees it: made
    when a plan starts it (``TokenStop.begin_draft``), filled token by token
    while it is drafted (``draft_on``), read when its verification arrives
    (``learn``)."""

    #: the step whose plan made it (``StepObservation.step``)
    step: int = 0
    #: the per-token stop governs this draft
    ruled: bool = False
    #: estimated chance that every token drafted so far is accepted
    survival: float = 1.0
    #: logit(q) of each drafted token, until its verification
    features: list[float] = field(default_factory=list)
    #: the estimated acceptance of each of them, as predicted when drafted
    predicted: list[float] = field(default_factory=list)


@dataclass(slots=True)
class TokenRuleRecord:
    """The per-token stop (``token_stop``)."""

    #: the request's own offset in the token-acceptance model
    bias: float = 0.0
    #: the drafts of the last plans, oldest first, each with its plan's step
    drafts: list[TokenDraft] = field(default_factory=lambda: [TokenDraft()])

    @property
    def draft(self) -> TokenDraft:
        """The draft of the last plan."""
        return self.drafts[-1]

    def start_draft(self, draft: TokenDraft) -> None:
        """A plan starts the request's next draft."""
        self.drafts.append(draft)
        del self.drafts[:-_DRAFTS_KEPT]

    def draft_of(self, step: int) -> TokenDraft:
        """The draft the plan of ``step`` made (the last one if no kept
        draft is of that step)."""
        for draft in reversed(self.drafts):
            if draft.step == step:
                return draft
        return self.drafts[-1]


@dataclass(slots=True)
class CostAwareState:
    #: the draft model's acceptance (``acceptance_rates``)
    acceptance: SourceCounts = field(default_factory=SourceCounts)
    #: the acceptance of the request's free drafts (an n-gram's), apart
    #: from the draft model's (``free_drafts``)
    free_drafts: SourceCounts = field(default_factory=SourceCounts)
    probes: ProbeRecord = field(default_factory=ProbeRecord)
    token_rule: TokenRuleRecord = field(default_factory=TokenRuleRecord)
