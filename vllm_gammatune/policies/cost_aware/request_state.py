"""A request's state under the cost-aware policy: one typed record per part.

Each record is written by the one part named beside it, and read by the
planner; no part writes another's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_gammatune.policies.cost_aware.token_draft import TokenDraft


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
class TokenRuleRecord:
    """The per-token stop (``token_stop``)."""

    #: the request's own offset in the token-acceptance model
    bias: float = 0.0
    #: the draft of the last plan
    draft: TokenDraft = field(default_factory=TokenDraft)
    #: the draft of the plan before it (verified where verifications arrive
    #: after the next plan: the CUDA hot path)
    previous_draft: TokenDraft = field(default_factory=TokenDraft)

    def draft_of(self, step: int) -> TokenDraft:
        """The draft the plan of ``step`` made (the last one if neither
        kept draft is of that step)."""
        return self.previous_draft if self.previous_draft.step == step != self.draft.step \
            else self.draft


@dataclass(slots=True)
class CostAwareState:
    #: the draft model's acceptance (``acceptance_rates``)
    acceptance: SourceCounts = field(default_factory=SourceCounts)
    #: the acceptance of the request's free drafts (an n-gram's), apart
    #: from the draft model's (``free_drafts``)
    free_drafts: SourceCounts = field(default_factory=SourceCounts)
    probes: ProbeRecord = field(default_factory=ProbeRecord)
    token_rule: TokenRuleRecord = field(default_factory=TokenRuleRecord)
