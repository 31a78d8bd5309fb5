"""A request's state under the cost-aware policy. Mutable: the policy's parts
update it in place, each its own fields (grouped below by part)."""

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
class CostAwareState:
    # -- acceptance rates (``acceptance_rates``) --
    #: decayed count of accepted draft tokens
    accepted: float = 0.0
    #: decayed count of verifications that ended in a rejected draft token
    rejections: float = 0.0
    # -- probing (``probe_scheduler``) --
    #: steps since this request last drafted
    steps_since_draft: int = 0
    #: steps without drafting after which it probes: a new request's first
    #: probe, and at batch 1 the one after a probe the target accepted, are
    #: due at once, later ones at the scheduler's base interval
    probe_interval: int = 1
    #: True while the last draft was a probe the target has not accepted
    probing: bool = False
    # -- the per-token stop (``token_stop``) --
    #: the request's own offset in the token-acceptance model
    bias: float = 0.0
    #: the draft of the last plan
    draft: TokenDraft = field(default_factory=TokenDraft)
    #: the draft of the plan before it (read where verifications arrive one
    #: plan late)
    previous_draft: TokenDraft = field(default_factory=TokenDraft)
    # -- free drafts (``free_drafts``) --
    #: acceptance of the request's free drafts (an n-gram's), apart from the
    #: draft model's (``accepted``, ``rejections``)
    free_drafts: SourceCounts = field(default_factory=SourceCounts)
