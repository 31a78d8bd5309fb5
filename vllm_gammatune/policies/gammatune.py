"""GammaTune and GammaTune+ (Gautam et al., "GammaTune", Section 4, Algorithm 1).

Per request, an exponentially weighted moving average of accepted-token counts
sets the next draft length:

- Adaptive expansion (eq. 7, Algorithm 1 lines 1-3): when every drafted token
  was accepted, the observation is raised by ``delta`` (the prose says the
  heuristic "increases A by delta"; taken literally, line 2 assigns to gamma,
  which line 5 overwrites at once, so the only reading with an effect is
  ``A <- A + delta`` before the average).
- Adaptive window (eq. 8, line 4): ``gamma_bar <- clamp((1 - eta) * gamma_bar
  + eta * A, gamma_min, gamma_max)``.
- Line 5: the next draft length is ``ceil(gamma_bar)``.

"Every drafted token was accepted" compares A with the number of tokens that
were *actually drafted* (as the newer Hugging Face assisted-generation code
does), not with the planned length: a draft that GammaTune+ cut short on low
confidence and that was then fully accepted still counts as "all accepted".

GammaTune+ (Section 4.2) adds a confidence stop: drafting of a request ends at
the first draft token whose top probability is below ``confidence_threshold``.
That token is kept in the draft (Hugging Face's ``ConfidenceCriteria`` stops
after appending the token, and verifying one more position is nearly free in
the target's batched pass).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vllm_gammatune.policies.base import BatchView, DraftLengthPolicy
from vllm_gammatune.policies.contracts import ConfidenceStop
from vllm_gammatune.policies.observation import Verification

# ceil() of an average that is an integer up to float rounding must not jump
# to the next integer (e.g. 0.5 * 4 + 0.5 * 6 evaluated as 5.000000000000001).
_CEIL_TOLERANCE = 1e-9


@dataclass(slots=True)
class GammaTuneState:
    #: the smoothed window, Algorithm 1's gamma-bar
    gamma_bar: float
    #: the next draft length, Algorithm 1's gamma
    gamma: int


class GammaTunePolicy(DraftLengthPolicy, ConfidenceStop):
    """Algorithm 1 of the GammaTune paper, one state per request.

    Args:
        max_num_draft_tokens: gamma_max, the cap (vLLM's num_speculative_tokens).
        gamma_init: initial gamma and gamma_bar of every request.
        gamma_min: lower clamp of gamma_bar (eq. 8).
        eta: EWMA weight of the newest observation, in (0, 1] (eq. 8).
        delta: expansion added to A when all drafted tokens were accepted (eq. 7).
        confidence_threshold: GammaTune+'s tau; None for plain GammaTune.
    """

    def __init__(
        self,
        max_num_draft_tokens: int,
        gamma_init: int,
        gamma_min: int,
        eta: float,
        delta: int,
        confidence_threshold: float | None = None,
    ):
        super().__init__(max_num_draft_tokens)
        if not 1 <= gamma_min <= gamma_init <= max_num_draft_tokens:
            raise ValueError(f"need 1 <= gamma_min <= gamma_init <= {max_num_draft_tokens}, "
                             f"got gamma_min={gamma_min}, gamma_init={gamma_init}")
        self.gamma_init = gamma_init
        self.gamma_min = gamma_min
        self.eta = eta
        self.delta = delta
        self.confidence_threshold = confidence_threshold
        # line 4's clamp, as floats once
        self._gamma_min, self._gamma_max = float(gamma_min), float(max_num_draft_tokens)

    def new_state(self) -> GammaTuneState:
        return GammaTuneState(gamma_bar=float(self.gamma_init), gamma=self.gamma_init)

    def next_num_draft_tokens(self, state: GammaTuneState, batch: BatchView) -> int:
        # within [gamma_min, gamma_max] by construction: line 4's clamp, and
        # gamma_init checked at construction
        return state.gamma

    def observe(self, state: GammaTuneState, verification: Verification) -> GammaTuneState:
        observed = verification.num_accepted_tokens
        if observed == verification.num_draft_tokens:  # lines 1-3, eq. 7
            observed += self.delta
        smoothed = (1.0 - self.eta) * state.gamma_bar + self.eta * observed
        gamma_bar = min(self._gamma_max, max(self._gamma_min, smoothed))  # line 4, eq. 8
        return GammaTuneState(gamma_bar, math.ceil(gamma_bar - _CEIL_TOLERANCE))  # line 5
