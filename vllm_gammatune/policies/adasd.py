"""AdaSD (Adaptive Speculative Decoding), the engine-independent half.

AdaSD (Section 4, Algorithm 1 in Appendix A) keeps two thresholds per
generation, learnt from what the target model did:

- Generation threshold (Section 4.3, Algorithm 1 lines 2-7 and 18): drafting
  stops *after* the first draft token whose entropy H(q_i) exceeds ``T_G``
  (line 6 ``if T_G < H(q_i) then break`` follows ``w <- i`` on line 5, so that
  token is kept), or after the window W. ``T_G = average(L_E^R)``, the mean
  entropy of every rejected draft token so far (line 18).
- Verification threshold (Section 4.4, lines 10-16 and 19): a draft token that
  does not match the target is still accepted when its Jensen-Shannon distance
  d_JS(p_i || q_i) is below ``T_V``; the first token that neither matches nor
  passes this test ends acceptance. ``T_V = (average(L_D^A) + average(L_D^R))
  / 2``, the midpoint of the mean distances of accepted and rejected tokens
  (line 19; the paper's example: 0.15 and 0.49 give 0.32).

L_E^R, L_D^A, L_D^R are running sums and counts, per request (Algorithm 1's
are per context X); L_E^R and L_D^R share a count (lines 12-13); line 16
records every token that passed line 11; line 9's y_{w+1} is not recorded.
Cold start: ``[null]`` reads as "no observation yet", so a threshold whose
mean does not exist keeps its initial 0 (``T_G`` until the first rejection,
``T_V`` until an accepted and a rejected distance exist: exact). A mismatch
is accepted when ``d_JS < T_V`` (strict, as Section 4.4's prose; line 11
would accept at equality). Why: ``docs/adasd.md``, "Thresholds, per request".

Ablations (Section 5.2-5.3), ``mode``: ``"both"`` (AdaSD), ``"generation"``
(Gen-Only: ``verification_threshold`` 0, exact), ``"verification"``
(Verify-Only: min(5, W) tokens, ``generation_threshold`` +inf); every mode
records the same statistics, so means compare across modes.

Interface: a ``ThresholdStop`` (``stop_measure`` "entropy",
``stop_threshold`` T_G; the drafter applies it token by token) and a
``RelaxedVerifier`` (``relaxes_verification``, ``accepts_mismatch``; the
rejection sampler applies them); ``observe`` learns from a verification's
per-token ``verdicts`` (``observe_verification``). ``draft_length`` and
``count_accepted`` are the pure reference of both loops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from vllm_gammatune.policies.base import BatchView, DraftLengthPolicy
from vllm_gammatune.policies.contracts import (
    STOP_ON_ENTROPY,
    RelaxedVerifier,
    ThresholdStop,
)
from vllm_gammatune.policies.observation import Verification

MODE_BOTH = "both"
MODE_GENERATION = "generation"
MODE_VERIFICATION = "verification"
#: Accepted values of ``adasd_mode``: AdaSD, Gen-Only, Verify-Only.
ADASD_MODES = (MODE_BOTH, MODE_GENERATION, MODE_VERIFICATION)

#: Appendix A: "we set the maximum window size W to 20".
PAPER_WINDOW = 20
#: Section 5.3: Verify-Only fixes the candidate length to five.
VERIFY_ONLY_NUM_DRAFT_TOKENS = 5


@dataclass(frozen=True)
class AdaSDState:
    """Algorithm 1's three lists of one request, as sums and counts."""

    #: len(L_D^A) without the initial null
    num_accepted: int = 0
    #: sum(L_D^A): JS distances of accepted draft tokens
    accepted_distance_sum: float = 0.0
    #: len(L_E^R) == len(L_D^R) without the initial null
    num_rejected: int = 0
    #: sum(L_E^R): entropies of rejected draft tokens
    rejected_entropy_sum: float = 0.0
    #: sum(L_D^R): JS distances of rejected draft tokens
    rejected_distance_sum: float = 0.0

    @property
    def mean_accepted_distance(self) -> float | None:
        """average(L_D^A), None while the list holds only its null."""
        if self.num_accepted == 0:
            return None
        return self.accepted_distance_sum / self.num_accepted

    @property
    def mean_rejected_distance(self) -> float | None:
        """average(L_D^R), None while the list holds only its null."""
        if self.num_rejected == 0:
            return None
        return self.rejected_distance_sum / self.num_rejected

    @property
    def mean_rejected_entropy(self) -> float | None:
        """average(L_E^R), None while the list holds only its null."""
        if self.num_rejected == 0:
            return None
        return self.rejected_entropy_sum / self.num_rejected


class AdaSDPolicy(DraftLengthPolicy, ThresholdStop, RelaxedVerifier):
    """Algorithm 1 of the AdaSD paper, one state per request.

    Verified token by token at the rejection sampler (``RelaxedVerifier``;
    ``verify.adasd_verifier``): each verification's ``verdicts`` (the
    draft's entropies and the distances to the target) are what it learns
    from (``observe_verification``).

    Args:
        max_num_draft_tokens: the cap (vLLM's num_speculative_tokens).
        window: the maximum window size W (the paper uses 20), in
            [1, max_num_draft_tokens].
        mode: one of ``ADASD_MODES``: "both" (AdaSD), "generation" (Gen-Only)
            or "verification" (Verify-Only).
    """

    def __init__(self, max_num_draft_tokens: int, window: int, mode: str):
        super().__init__(max_num_draft_tokens)
        if mode not in ADASD_MODES:
            raise ValueError(
                f"adasd_mode={mode!r} is not allowed: must be one of "
                "'both' (AdaSD), 'generation' (Gen-Only: entropy stop, exact "
                "verification) or 'verification' (Verify-Only: fixed draft of "
                f"{VERIFY_ONLY_NUM_DRAFT_TOKENS} tokens, relaxed verification)"
            )
        if (
            isinstance(window, bool)
            or not isinstance(window, int)
            or not 1 <= window <= max_num_draft_tokens
        ):
            raise ValueError(
                f"window={window!r} is not allowed: AdaSD's maximum window size "
                "W must be an integer in "
                f"[1, num_speculative_tokens={max_num_draft_tokens}]"
            )
        self.window = window
        self.mode = mode
        #: whether drafting stops on entropy (line 6): False in Verify-Only
        self.stops_on_entropy = mode != MODE_VERIFICATION
        #: whether mismatches may be accepted (line 11): False in Gen-Only
        self._relaxes = mode != MODE_GENERATION
        if mode == MODE_VERIFICATION:
            self._planned = min(VERIFY_ONLY_NUM_DRAFT_TOKENS, window)
        else:
            self._planned = window

    def new_state(self) -> AdaSDState:
        return AdaSDState()

    def next_num_draft_tokens(self, state: AdaSDState, batch: BatchView) -> int:
        """W (the entropy stop may end the draft earlier); min(5, W) in Verify-Only."""
        return self._planned

    # -- thresholds (lines 18-19) ---------------------------------------------
    def generation_threshold(self, state: AdaSDState) -> float:
        """T_G = average(L_E^R) (line 18); 0 before any rejection.

        +inf in Verify-Only: no entropy exceeds it, drafting never stops early.
        """
        if not self.stops_on_entropy:
            return math.inf
        mean = state.mean_rejected_entropy
        return 0.0 if mean is None else mean

    def verification_threshold(self, state: AdaSDState) -> float:
        """T_V = (average(L_D^A) + average(L_D^R)) / 2 (line 19).

        0 until both an accepted and a rejected distance are recorded, and
        always 0 in Gen-Only: under the strict test ``d_JS < T_V``, 0 relaxes
        nothing.
        """
        if not self._relaxes:
            return 0.0
        accepted = state.mean_accepted_distance
        rejected = state.mean_rejected_distance
        if accepted is None or rejected is None:
            return 0.0
        return (accepted + rejected) / 2.0

    # -- the per-token stop, as the drafter applies it (line 6) -----------------
    @property
    def stop_measure(self) -> str | None:
        """"entropy" (the draft stops after a token with H(q_i) > T_G); None
        in Verify-Only, which drafts a fixed length."""
        return STOP_ON_ENTROPY if self.stops_on_entropy else None

    def stop_threshold(self, state: AdaSDState) -> float:
        """T_G of this request (``generation_threshold``)."""
        return self.generation_threshold(state)

    # -- the two tests ----------------------------------------------------------
    def should_stop_drafting(self, state: AdaSDState, entropy: float) -> bool:
        """Line 6: the draft ends after this token when H(q_i) > T_G (strict)."""
        return entropy > self.generation_threshold(state)

    def accepts_mismatch(self, state: AdaSDState, js_distance: float) -> bool:
        """Line 11 as Section 4.4 words it: a token that does not match the
        target's is still accepted when d_JS(p_i || q_i) < T_V (strict)."""
        return js_distance < self.verification_threshold(state)

    def draft_length(self, state: AdaSDState, entropies: Sequence[float]) -> int:
        """Lines 2-7: how many tokens are drafted, given the entropies H(q_i)
        of the tokens the draft model produces, in order.

        Up to and including the first token whose entropy exceeds T_G, at most
        ``next_num_draft_tokens``; all the given ones (within that cap) if none
        exceeds it.
        """
        considered = list(entropies)[: self._planned]
        if not considered:
            raise ValueError("entropies is empty: a draft has at least one token")
        for i, entropy in enumerate(considered, start=1):
            if self.should_stop_drafting(state, entropy):
                return i
        return len(considered)

    def count_accepted(
        self,
        state: AdaSDState,
        matches: Sequence[bool],
        js_distances: Sequence[float],
    ) -> int:
        """Lines 10-15: the number of draft tokens accepted, in order.

        ``matches[i]`` says whether draft token i equals the target's;
        acceptance ends at the first token that neither matches nor passes
        ``accepts_mismatch``.
        """
        if len(matches) != len(js_distances):
            raise ValueError(
                f"need one JS distance per draft token, got {len(js_distances)} "
                f"distances for {len(matches)} tokens"
            )
        for i, (match, distance) in enumerate(zip(matches, js_distances)):
            if not match and not self.accepts_mismatch(state, distance):
                return i
        return len(matches)

    @property
    def relaxes_verification(self) -> bool:
        """Line 11 is on: False in Gen-Only, whose verification is vLLM's."""
        return self._relaxes

    # -- update (lines 12-16, then 18-19) ------------------------------------
    def observe(self, state: AdaSDState, verification: Verification) -> AdaSDState:
        """One verification, token by token (``Verification.verdicts``)."""
        verdicts = verification.verdicts
        if verdicts is None:  # verified exactly, without what was kept: nothing learned
            return state
        return self.observe_verification(state, verdicts.accepted_distances,
                                         verdicts.rejected)

    def observe_verification(
        self,
        state: AdaSDState,
        accepted_distances: Sequence[float],
        rejected: tuple[float, float] | None,
    ) -> AdaSDState:
        """Return the state after one verification of this request.

        Args:
            accepted_distances: d_JS of every accepted draft token (matching or
                relaxed), line 16.
            rejected: (H(q_i), d_JS(p_i || q_i)) of the first rejected draft
                token (lines 12-13), or None when every drafted token was
                accepted.
        """
        distances = [float(d) for d in accepted_distances]
        for d in distances:
            _check_distance("accepted JS distance", d)
        num_verified = len(distances) + (rejected is not None)
        if num_verified > self._planned:
            raise ValueError(
                f"{len(distances)} accepted"
                f"{' + 1 rejected' if rejected is not None else ''} draft tokens "
                f"is more than this policy drafts ({self._planned})"
            )
        num_rejected = state.num_rejected
        rejected_entropy_sum = state.rejected_entropy_sum
        rejected_distance_sum = state.rejected_distance_sum
        if rejected is not None:
            entropy, distance = (float(v) for v in rejected)
            if not (math.isfinite(entropy) and entropy >= 0.0):
                raise ValueError(
                    f"rejected entropy={entropy!r} is not allowed: must be a "
                    "finite number >= 0 (bits)"
                )
            _check_distance("rejected JS distance", distance)
            num_rejected += 1
            rejected_entropy_sum += entropy
            rejected_distance_sum += distance
        return AdaSDState(
            num_accepted=state.num_accepted + len(distances),
            accepted_distance_sum=state.accepted_distance_sum + math.fsum(distances),
            num_rejected=num_rejected,
            rejected_entropy_sum=rejected_entropy_sum,
            rejected_distance_sum=rejected_distance_sum,
        )


def _check_distance(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:  # also false for NaN
        raise ValueError(
            f"{name}={value!r} is not allowed: a base-2 Jensen-Shannon "
            "distance is in [0, 1]"
        )
