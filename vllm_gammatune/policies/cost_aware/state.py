"""A request's state under the cost-aware policy: its acceptance counts and
where it stands in probing. Mutable: the policy updates it in place."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CostAwareState:
    #: decayed count of accepted draft tokens
    accepted: float = 0.0
    #: decayed count of verifications that ended in a rejected draft token
    rejections: float = 0.0
    #: steps since this request last drafted
    steps_since_draft: int = 0
    #: steps without drafting after which it probes
    probe_interval: int = 8
    #: True while the last draft was a probe
    probing: bool = False
