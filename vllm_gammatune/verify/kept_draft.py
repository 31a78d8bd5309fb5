"""What the drafter keeps of a draft for its verification token by token.

AdaSD's verification (``adasd_verifier``) reads, per drafted token, the
draft's distribution q_i (the JS distance to the target's, Algorithm 1 line
11) and its entropy H(q_i) (T_G's update from the first rejected token,
lines 18-19). The drafter builds them while drafting
(``drafter.draft_step.DraftStep.kept_drafts``) and keeps them in the
request's record until the draft is verified.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class KeptDraft:
    """What the drafter keeps of one request's latest draft until it is verified."""

    #: [num_draft_tokens, vocab] q_i in bfloat16, or None where the mode does
    #: not relax verification (Gen-Only needs the entropies alone)
    distributions: torch.Tensor | None
    #: [num_draft_tokens] H(q_i), in bits
    entropies: torch.Tensor

    def covers(self, num_draft_tokens: int, needs_distributions: bool) -> bool:
        """Whether it holds what a verification of ``num_draft_tokens`` needs."""
        if self.entropies.shape[0] < num_draft_tokens:
            return False
        return not needs_distributions or self.distributions is not None
