"""A request's state under the cost-aware policy. Mutable: the policy's parts
update it in place, each its own fields (grouped below by part)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CostAwareState:
    # -- acceptance rates (``acceptance_rates``) --
    #: decayed count of accepted draft tokens
    accepted: float = 0.0
    #: decayed count of verifications that ended in a rejected draft token
    rejections: float = 0.0
    # -- probing (``probe_scheduler``) --
    #: steps since this request last drafted
    steps_since_draft: int = 0
    #: steps without drafting after which it probes
    probe_interval: int = 8
    #: True while the last draft was a probe
    probing: bool = False
    # -- the per-token stop (``token_stop``) --
    #: the request's own offset in the token-acceptance model
    bias: float = 0.0
    #: True when the per-token stop governs this step's draft
    ruled: bool = False
    #: estimated chance that every token drafted so far this step is accepted
    survival: float = 1.0
    #: logit(q) of each token drafted this step, until its verification
    features: list[float] = field(default_factory=list)
    #: the estimated acceptance of each of them, as predicted when drafted
    predicted: list[float] = field(default_factory=list)
    #: the step plan's length for this request and the tokens it expected
    #: of it, while the rule governs its draft
    planned_length: int = 0
    planned_tokens: float = 0.0
