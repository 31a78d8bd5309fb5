"""Each request's acceptance rate, the cost-aware plan's measure of its draft.

Per request, decayed counts of accepted draft tokens ``S`` and of
verifications that end in a rejection ``F`` give the maximum-likelihood rate
of a truncated geometric, ``a = S / (S + F)``. It is shrunk toward the rate of
all requests (``prior_weight`` pseudo-observations), so a new request starts
from what the engine has seen rather than from nothing, and kept inside
``[MIN_RATE, MAX_RATE]``, since ``a = 1`` makes the expected tokens infinite.

Under the geometric model a verification of ``k`` draft tokens emits
``E(k) = (1 - a^(k+1)) / (1 - a)`` tokens (``expected_tokens``): the
accepted prefix and the target's own token after it.
"""

from __future__ import annotations

from vllm_gammatune.policies.cost_aware.request_state import SourceCounts

#: Acceptance rates are kept inside this interval (a = 1 would make E infinite).
MIN_RATE, MAX_RATE = 0.01, 0.99


def expected_tokens(rate: float, num_draft_tokens: int) -> float:
    """E(k) = (1 - a^(k+1)) / (1 - a): tokens one verification emits."""
    return (1.0 - rate ** (num_draft_tokens + 1)) / (1.0 - rate)


class AcceptanceRates:
    """Decayed acceptance counts per request and engine-wide.

    Args:
        memory: weight kept by older observations per new one.
        prior_weight: pseudo-observations pulling a request's rate toward
            the engine-wide rate (0: none; a request without observations
            then has the engine's rate).
    """

    def __init__(self, memory: float = 0.9, prior_weight: float = 2.0):
        self.memory = memory
        self.prior_weight = prior_weight
        # engine-wide decayed counts (the prior of new requests)
        self._accepted = 1.0
        self._rejections = 1.0

    def rate(self, state: SourceCounts) -> float:
        return self.rates([state])[0]

    def rates(self, states: list[SourceCounts]) -> list[float]:
        """[num_reqs] each request's rate (``rate``, its prior once a step)."""
        prior = self._accepted / (self._accepted + self._rejections)
        w = self.prior_weight
        rates = []
        for state in states:
            weight = state.accepted + state.rejections + w
            rate = (state.accepted + w * prior) / weight if weight > 0.0 else prior
            rates.append(MAX_RATE if rate > MAX_RATE else MIN_RATE if rate < MIN_RATE else rate)
        return rates

    def observe(self, state: SourceCounts, num_draft_tokens: int,
                num_accepted_tokens: int) -> None:
        """One verification of the request: update its counts and the engine's."""
        rejected = 1.0 if num_accepted_tokens < num_draft_tokens else 0.0
        m = self.memory
        state.accepted = m * state.accepted + num_accepted_tokens
        state.rejections = m * state.rejections + rejected
        self._accepted = m * self._accepted + num_accepted_tokens
        self._rejections = m * self._rejections + rejected
