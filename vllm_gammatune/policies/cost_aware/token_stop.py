"""The per-token stop: draft a request's next token only while it pays.

The step plan (``planner``) decides which requests draft at all. A request
that drafts for its own sake may then draft up to the cap, and after each
token it has drafted the rule decides, from that token's estimated
acceptance (``token_acceptance``), whether to go on:

- the token's *survival* ``S_i = alpha_1 * ... * alpha_i`` is the chance
  that verification accepts it and every token before it, i.e. the expected
  tokens it adds to the step;
- one more draft token costs ``c_token``, one more verified position and
  one more token in the next step's first draft pass, and the draft pass
  that proposes it costs ``c_pass``, shared by every request still drafting
  (both from the policy's cost fits, ``step_costs``, around the batch size);
- the step maximises tokens per second, so a token pays when it adds tokens
  faster than the engine makes them: at ``R``, the plan's expected tokens per
  second. This is the
  marginal condition of the ratio's maximum (Dinkelbach), as in the
  planner, applied with the evidence of each drafted token.

After the draft's pass ``i``, each request still drafting:

1. keeps token ``i`` only if ``S_i >= R * c_token`` (its pass is paid; what
   remains is its verification): otherwise its draft ends at ``i - 1``;
2. stops at ``i`` if its next token's expected gain
   ``g = S_i * alpha_next - R * c_token`` is not positive, where
   ``alpha_next`` is the estimate at position ``i + 1`` from token ``i``'s
   probability (the next token's own is not known before its pass);

and the next pass runs only if the gains of the requests that would go on
exceed its cost, ``sum g > R * c_pass`` (``next_pass_pays``); otherwise
they all stop at ``i``.
Survival only falls along a draft, so this one-step look-ahead is the
optimal stop of the monotone case. Lossless: the stop depends on the draft's
tokens alone; verification is vLLM's rejection sampler, unchanged.

Pure Python: the proposer hands the token probabilities of each pass as a
list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vllm_gammatune.policies.cost_aware.request_state import (
    CostAwareState,
    TokenDraft,
    TokenRuleRecord,
)
from vllm_gammatune.policies.cost_aware.token_acceptance import (
    TokenAcceptanceModel,
    logit,
)


@dataclass(frozen=True)
class TokenPrices:
    """What one more draft token of a step is measured against."""

    #: R: tokens per second the step's plan is expected to make
    rate: float
    #: seconds of one more draft token (verification + next first pass)
    per_token: float
    #: seconds of one more draft pass over the batch
    per_pass: float


def judge_token(model: TokenAcceptanceModel, feature: float, position: int,
                survival: float, request_bias: float,
                threshold: float) -> tuple[int | None, float]:
    """Steps 1 and 2 of the module docstring for one request's token at
    ``position``, whose ``survival`` includes it: (the length its draft ends
    at, or None to go on; the next token's expected gain ``g``).
    ``threshold`` is ``R * c_token``."""
    if survival < threshold:
        return position - 1, 0.0
    gain = survival * model.predict(feature, position + 1, request_bias) - threshold
    return (position if gain <= 0.0 else None), gain


def next_pass_pays(gains: Sequence[float], prices: TokenPrices) -> bool:
    """The pass-level check of the module docstring: one more draft pass
    runs only if the next tokens' expected gains ``g`` of the requests that
    would go on exceed its price, ``sum g > R * c_pass``."""
    return sum(gains) > prices.rate * prices.per_pass


def rule_draft(features: Sequence[float], model: TokenAcceptanceModel,
               prices: TokenPrices, cap: int, request_bias: float = 0.0) -> tuple[int, int]:
    """(length kept, draft passes run) of the rule for one request drafting
    alone, given the ``logit(q)`` of the tokens the draft would propose (at
    least as many as it drafts; offline simulation of recorded traces). The
    passes exceed the length by one where the last drafted token was not
    worth verifying."""
    survival = 1.0
    threshold = prices.rate * prices.per_token
    for index, feature in enumerate(features[:cap]):
        position = index + 1
        survival *= model.predict(feature, position, request_bias)
        end, gain = judge_token(model, feature, position, survival, request_bias, threshold)
        if end is not None:
            return end, position
        if position == cap or not next_pass_pays([gain], prices):
            return position, position
    drafted = min(cap, len(features))
    return drafted, drafted


class TokenStop:
    """The rule's prices for the step being drafted, and its token model.

    Args:
        enabled: the rule governs drafts; off, it only calibrates its model
            (the token probabilities are read after every pass either way:
            they also feed traces).
        learns: the token model learns from verifications; off, a token's
            acceptance is the draft's own probability (its cold start).
    """

    def __init__(self, enabled: bool = True, learns: bool = True):
        self.enabled = enabled
        self.model = (TokenAcceptanceModel() if learns else
                      TokenAcceptanceModel(learning_rate=0.0, request_learning_rate=0.0))
        #: prices of the step being drafted, None where the rule is off
        self._prices: TokenPrices | None = None

    def begin_draft(self, states: list[CostAwareState], step: int,
                    prices: TokenPrices | None = None, ruled: Sequence[bool] = ()) -> None:
        """The plan of ``step`` was made: each request's draft starts afresh.
        With ``prices``, the rule governs the drafts of the requests
        ``ruled`` ([num_reqs]); without, it governs none this step."""
        self._prices = prices
        for i, state in enumerate(states):
            state.token_rule.start_draft(TokenDraft(step=step, ruled=prices is not None
                                                    and ruled[i]))

    def draft_on(self, states: list[CostAwareState], position: int,
                 token_probs: Sequence[float], active: Sequence[bool]) -> list[int | None]:
        """After draft pass ``position`` (1-based): per request, None to draft
        on, or the length its draft ends at. ``token_probs``: the draft's
        probability of each request's token of this pass; ``active``: the
        requests that drafted in it."""
        model = self.model
        prices = self._prices
        decisions: list[int | None] = [None] * len(states)
        going_on: list[tuple[int, float]] = []
        threshold = 0.0 if prices is None else prices.rate * prices.per_token
        for i, (state, q, drafted) in enumerate(zip(states, token_probs, active)):
            if not drafted:
                continue
            record = state.token_rule
            draft = record.draft
            feature = logit(q)
            draft.features.append(feature)
            alpha = model.predict(feature, position, record.bias)
            draft.predicted.append(alpha)
            if not draft.ruled:
                continue
            draft.survival *= alpha
            end, gain = judge_token(model, feature, position, draft.survival, record.bias,
                                    threshold)
            if end is None:
                going_on.append((i, gain))
            else:
                decisions[i] = end
        if going_on and not next_pass_pays([g for _, g in going_on], prices):
            for i, _ in going_on:
                decisions[i] = position
        return decisions

    def learn(self, record: TokenRuleRecord, step: int, num_draft_tokens: int,
              num_accepted_tokens: int) -> None:
        """Label the verified tokens of the request's draft of ``step``."""
        features = record.draft_of(step).features
        if num_draft_tokens and features:
            record.bias = self.model.learn(features[:num_draft_tokens], num_accepted_tokens,
                                           record.bias)

    @staticmethod
    def verification_details(record: TokenRuleRecord, step: int,
                             num_draft_tokens: int) -> dict:
        """The verified draft's tokens as the rule saw them (for traces)."""
        predicted = record.draft_of(step).predicted[:num_draft_tokens]
        return {"predicted_acceptance": [round(a, 4) for a in predicted]}
