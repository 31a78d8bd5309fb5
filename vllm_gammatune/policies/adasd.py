"""AdaSD (Adaptive Speculative Decoding), the engine-independent half.

AdaSD (Section 4, Algorithm 1 in Appendix A) keeps two thresholds per
generation and updates both from what the target model did:

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

The three lists of Algorithm 1 (L_E^R, L_D^A, L_D^R) are kept as running sums
and counts, so a request's state has a fixed size however long it runs.
L_E^R and L_D^R are appended together (lines 12-13), so one count serves
both. Accepted distances include mismatching tokens that the relaxation let
through: line 16 records every token that passed line 11. The token the
target samples after the accepted prefix (line 9's y_{w+1}) is not recorded.
As in Algorithm 1, whose lists are initialised per call (per context X), the
state is per request.

Cold start. Algorithm 1 initialises ``T_G = T_V = 0`` and every list to
``[null]``. We read ``null`` as "no observation yet": an average over a list
that holds no real entry does not exist, and a threshold whose formula needs
such an average keeps its initial value 0. Hence:

- ``T_G = 0`` until the first rejection, so every draft stops after its first
  token of positive entropy (drafts of length 1) until the target has
  rejected something;
- ``T_V = 0`` until at least one accepted *and* one rejected distance exist.
  With the strict test ``d_JS < T_V`` and ``d_JS >= 0``, ``T_V = 0`` relaxes
  nothing: verification is exact until both sides of the midpoint are known.

Why not "an empty average counts as 0"? For ``T_G`` both readings agree. For
``T_V`` that reading gives ``T_V = mean_accepted / 2 > 0`` before any
rejection (relaxing verification before the target has shown what a
rejected token looks like), and ``T_V = d_rejected / 2`` after a first-token
rejection with nothing accepted yet (a midpoint with one end invented at 0).
Section 4.4 defines ``T_V`` as the midpoint between the two means, which needs
both; the initial ``T_V = 0`` is exact verification, the conservative state
the initialisation evidently intends. (Reading ``null`` as NaN, which
propagates, is worse: NaN comparisons are false, so line 6 would never stop
and line 11 would never reject.)

Strictness. Line 6 stops when ``T_G < H(q_i)`` (strict), as Section 4.3's
"exceeds". Line 11 rejects a mismatch when ``T_V < d_JS``, i.e. it would
accept at ``d_JS == T_V``, whereas Section 4.4 says the token is accepted "if
the computed distance is smaller than the threshold". We follow the prose
(strict ``<``): the two differ only at exact equality, and only the strict
test keeps ``T_V = 0`` exact (a mismatch at distance exactly 0 is not
accepted).

Ablations (Section 5.2-5.3), chosen with ``mode``:

- ``"both"``: AdaSD. Plans W tokens; the entropy stop may end a draft early.
- ``"generation"`` (Gen-Only): the generation threshold only; verification is
  exact (``verification_threshold`` is 0, which relaxes nothing).
- ``"verification"`` (Verify-Only): a fixed draft of five tokens ("consistent
  with the Vanilla setting"), min(5, W) here, no entropy stop
  (``generation_threshold`` is +inf), and the verification threshold.

Every mode records the same statistics, so a state's means are comparable
across modes.

Interface. AdaSD learns from entropies and distances, not from the token
counts of ``DraftLengthPolicy.observe``: it declares ``learns_per_token``,
so its update is ``observe_verification(state, accepted_distances,
rejected)``, called at the rejection sampler, and the count-based ``observe``
is never called for it. Its entropy stop is the base class's per-token stop
(``stop_measure`` "entropy", ``stop_threshold`` = T_G), applied by the
drafter token by token; its relaxation is ``relaxes_verification`` and
``accepts_mismatch``, applied by the rejection sampler. ``draft_length`` and
``count_accepted`` are the pure reference of both loops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from vllm_gammatune.policies.base import BatchView, DraftLengthPolicy

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


class AdaSDPolicy(DraftLengthPolicy):
    """Algorithm 1 of the AdaSD paper, one state per request.

    Learns at the rejection sampler (``observe_verification``): the draft's
    entropies and the distances to the target are what it learns from.

    Args:
        max_num_draft_tokens: the cap (vLLM's num_speculative_tokens).
        window: the maximum window size W (the paper uses 20), in
            [1, max_num_draft_tokens].
        mode: one of ``ADASD_MODES``: "both" (AdaSD), "generation" (Gen-Only)
            or "verification" (Verify-Only).
    """

    learns_per_token = True

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
        self.relaxes_verification = mode != MODE_GENERATION
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
        if not self.relaxes_verification:
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
        return "entropy" if self.stops_on_entropy else None

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

    # -- update (lines 12-16, then 18-19) ------------------------------------
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
