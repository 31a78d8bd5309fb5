"""One draft as the per-token stop sees it, and the prices it is judged at.

A request's ``TokenDraft`` is made when a plan starts its draft
(``TokenStop.begin_draft``), filled token by token while it is drafted
(``TokenStop.draft_on``), and read when its verification arrives
(``TokenStop.revision`` and ``learn``). A drafter whose verifications
arrive after the next plan (the CUDA hot path) verifies an earlier draft
while the current one is being drafted, so a request keeps its last few,
each with the step of its plan (``request_state.TokenRuleRecord``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TokenPrices:
    """What one more draft token of this step is measured against."""

    #: R: tokens per second the step's plan is expected to make
    rate: float
    #: seconds of one more draft token (verification + next first pass)
    per_token: float
    #: seconds of one more draft pass over the batch
    per_pass: float


@dataclass(slots=True)
class TokenDraft:
    """A request's draft of one step."""

    #: the step whose plan made it (``StepObservation.step``)
    step: int = 0
    #: the step's prices where the per-token stop governs this draft, else None
    prices: TokenPrices | None = None
    #: estimated chance that every token drafted so far is accepted
    survival: float = 1.0
    #: logit(q) of each drafted token, until its verification
    features: list[float] = field(default_factory=list)
    #: the estimated acceptance of each of them, as predicted when drafted
    predicted: list[float] = field(default_factory=list)
    #: the step plan's length for this request and the tokens it expected of
    #: it, where the rule governs the draft
    planned_length: int = 0
    planned_tokens: float = 0.0

    @property
    def ruled(self) -> bool:
        """The per-token stop governs this draft."""
        return self.prices is not None
