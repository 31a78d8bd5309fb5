"""AdaSD's pure policy against Algorithm 1 of the AdaSD paper (Appendix A)."""

import dataclasses
import math
import random

import pytest

from vllm_gammatune.policies.adasd import (
    ADASD_MODES,
    PAPER_WINDOW,
    AdaSDPolicy,
    AdaSDState,
)
from vllm_gammatune.policies.base import BatchView, DraftLengthPolicy
from vllm_gammatune.policies.contracts import ConfidenceStop, RelaxedVerifier, ThresholdStop
from vllm_gammatune.policies.observation import TokenVerdicts, Verification

BATCH = BatchView(num_reqs=1)


def observe_all(policy, observations, state=None):
    """Feed (accepted_distances, rejected) pairs to observe_verification."""
    state = policy.new_state() if state is None else state
    for accepted, rejected in observations:
        state = policy.observe_verification(state, accepted, rejected)
    return state


# -- cold start -----------------------------------------------------------------
def test_cold_start_thresholds_are_zero():
    policy = AdaSDPolicy(20, PAPER_WINDOW, "both")
    state = policy.new_state()
    assert policy.generation_threshold(state) == 0.0
    assert policy.verification_threshold(state) == 0.0


def test_cold_start_draft_stops_after_first_token_of_positive_entropy():
    policy = AdaSDPolicy(20, 20, "both")
    state = policy.new_state()
    assert policy.next_num_draft_tokens(state, BATCH) == 20
    assert policy.draft_length(state, [0.3, 0.1, 0.2]) == 1
    assert policy.draft_length(state, [1e-9, 5.0]) == 1
    # line 6 is strict: entropy exactly 0 does not exceed T_G = 0
    assert policy.draft_length(state, [0.0, 0.0, 0.7, 0.1]) == 3
    assert not policy.should_stop_drafting(state, 0.0)


def test_generation_threshold_stays_zero_until_a_rejection():
    policy = AdaSDPolicy(20, 20, "both")
    state = observe_all(policy, [([0.1], None), ([0.2, 0.05], None)])
    assert policy.generation_threshold(state) == 0.0
    assert policy.draft_length(state, [0.4, 0.4]) == 1
    state = policy.observe_verification(state, [], (2.5, 0.7))
    assert policy.generation_threshold(state) == 2.5
    assert policy.draft_length(state, [0.4, 2.5, 2.6, 0.1]) == 3


def test_nothing_relaxed_before_a_rejection():
    policy = AdaSDPolicy(20, 20, "both")
    state = observe_all(policy, [([0.3], None), ([0.2, 0.4], None)])
    assert state.mean_accepted_distance == pytest.approx(0.3)
    # "empty average counts as 0" would give T_V = 0.15 here
    assert policy.verification_threshold(state) == 0.0
    assert not policy.accepts_mismatch(state, 0.0)
    assert policy.count_accepted(state, [True, False], [0.5, 0.0]) == 1


def test_nothing_relaxed_after_a_rejection_with_nothing_accepted_yet():
    policy = AdaSDPolicy(20, 20, "both")
    state = policy.observe_verification(policy.new_state(), [], (1.0, 0.6))
    # "empty average counts as 0" would give T_V = 0.3 here
    assert policy.verification_threshold(state) == 0.0
    state = policy.observe_verification(state, [0.2], None)
    assert policy.verification_threshold(state) == pytest.approx(0.4)
    assert policy.accepts_mismatch(state, 0.39)


# -- threshold updates (lines 18-19) -------------------------------------------
def test_papers_worked_example_verification_threshold_is_0_32():
    # Section 4.4: twenty accepted and twenty rejected tokens whose mean JS
    # distances are 0.15 and 0.49 give T_V = 0.32.
    policy = AdaSDPolicy(20, 20, "both")
    observations = [
        ([0.10 if i % 2 else 0.20], (1.0, 0.40 if i % 2 else 0.58)) for i in range(20)
    ]
    state = observe_all(policy, observations)
    assert state.num_accepted == 20 and state.num_rejected == 20
    assert state.mean_accepted_distance == pytest.approx(0.15)
    assert state.mean_rejected_distance == pytest.approx(0.49)
    assert policy.verification_threshold(state) == pytest.approx(0.32)


def test_generation_threshold_is_the_mean_rejected_entropy():
    policy = AdaSDPolicy(20, 20, "both")
    state = observe_all(
        policy,
        [
            ([0.1, 0.1], (2.0, 0.5)),
            ([0.2], None),  # no rejection: T_G unchanged
            ([], (3.5, 0.9)),
            ([0.05, 0.1, 0.2], (1.0, 0.6)),
        ],
    )
    assert state.num_rejected == 3
    assert policy.generation_threshold(state) == pytest.approx((2.0 + 3.5 + 1.0) / 3)
    # accepted: 0.1 0.1 0.2 0.05 0.1 0.2 -> 0.125; rejected: 0.5 0.9 0.6 -> 2/3
    assert policy.verification_threshold(state) == pytest.approx((0.125 + 2 / 3) / 2)


def test_observe_returns_a_new_fixed_size_state():
    policy = AdaSDPolicy(20, 20, "both")
    start = policy.new_state()
    state = observe_all(policy, [([0.1] * 19, (0.5, 0.5))] * 500)
    assert start == AdaSDState()  # frozen, untouched
    assert state.num_accepted == 19 * 500 and state.num_rejected == 500
    assert all(
        isinstance(getattr(state, f.name), (int, float))
        for f in dataclasses.fields(state)
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.num_accepted = 0


# -- the two tests ------------------------------------------------------------------
def test_generation_stop_is_strictly_greater():
    policy = AdaSDPolicy(20, 20, "both")
    state = policy.observe_verification(policy.new_state(), [], (2.0, 0.5))
    assert not policy.should_stop_drafting(state, 2.0)
    assert policy.should_stop_drafting(state, math.nextafter(2.0, math.inf))
    # the token that exceeds T_G is kept: stop *after* it
    assert policy.draft_length(state, [1.0, 2.0, 2.5, 0.1]) == 3
    # no token exceeds T_G: the whole window
    assert policy.draft_length(state, [1.0] * 25) == 20


def test_verification_relaxation_is_strictly_less():
    policy = AdaSDPolicy(20, 20, "both")
    state = observe_all(policy, [([0.15], (1.0, 0.49))])
    t_v = policy.verification_threshold(state)
    assert t_v == pytest.approx(0.32)
    assert not policy.accepts_mismatch(state, t_v)
    assert policy.accepts_mismatch(state, math.nextafter(t_v, 0.0))


def test_first_token_failing_both_tests_ends_acceptance():
    policy = AdaSDPolicy(20, 20, "both")
    state = observe_all(policy, [([0.15], (1.0, 0.49))])  # T_V = 0.32
    # match (distance irrelevant), relaxed mismatch, failing mismatch, match
    assert policy.count_accepted(state, [True, False, False, True], [0.9, 0.1, 0.5, 0.0]) == 2
    assert policy.count_accepted(state, [True, True], [0.9, 0.9]) == 2
    assert policy.count_accepted(state, [False], [0.33]) == 0
    with pytest.raises(ValueError, match="one JS distance per draft token"):
        policy.count_accepted(state, [True, False], [0.1])


# -- a literal transcription of Algorithm 1 -------------------------------------
def algorithm_1_reference(window, iterations, seed):
    """Lines 2-19 with Python lists; a threshold keeps its value while a list
    it averages holds no real entry (the module's reading of [null])."""
    rng = random.Random(seed)
    l_e_r, l_d_r, l_d_a = [], [], []
    t_g = t_v = 0.0
    trace = []
    for _ in range(iterations):
        entropies = [rng.uniform(0.0, 4.0) for _ in range(window)]
        matches = [rng.random() < 0.7 for _ in range(window)]
        distances = [rng.random() for _ in range(window)]
        w = window
        for i in range(1, window + 1):  # lines 2-7
            if t_g < entropies[i - 1]:
                w = i
                break
        accepted = w
        for i in range(1, w + 1):  # lines 10-16
            if not matches[i - 1] and t_v < distances[i - 1]:
                l_e_r.append(entropies[i - 1])
                l_d_r.append(distances[i - 1])
                accepted = i - 1
                break
            l_d_a.append(distances[i - 1])
        if l_e_r:  # line 18
            t_g = sum(l_e_r) / len(l_e_r)
        if l_d_a and l_d_r:  # line 19
            t_v = (sum(l_d_a) / len(l_d_a) + sum(l_d_r) / len(l_d_r)) / 2
        trace.append((entropies, matches, distances, w, accepted, t_g, t_v))
    return trace


def test_policy_follows_a_literal_transcription_of_algorithm_1():
    window = 8
    policy = AdaSDPolicy(16, window, "both")
    state = policy.new_state()
    trace = algorithm_1_reference(window, iterations=300, seed=11)
    drafted_lengths = set()
    for entropies, matches, distances, w, accepted, t_g, t_v in trace:
        drafted = policy.draft_length(state, entropies)
        num_accepted = policy.count_accepted(state, matches[:drafted], distances[:drafted])
        assert (drafted, num_accepted) == (w, accepted)
        rejected = None
        if num_accepted < drafted:
            rejected = (entropies[num_accepted], distances[num_accepted])
        state = policy.observe_verification(state, distances[:num_accepted], rejected)
        assert policy.generation_threshold(state) == pytest.approx(t_g)
        assert policy.verification_threshold(state) == pytest.approx(t_v)
        drafted_lengths.add(drafted)
    assert len(drafted_lengths) > 2  # the trace exercised the entropy stop


# -- modes ------------------------------------------------------------------------
def test_both_mode_uses_both_thresholds():
    policy = AdaSDPolicy(16, 12, "both")
    assert policy.stops_on_entropy and policy.relaxes_verification
    state = observe_all(policy, [([0.1], (2.0, 0.5))])
    assert policy.next_num_draft_tokens(state, BATCH) == 12
    assert policy.should_stop_drafting(state, 2.1)
    assert policy.accepts_mismatch(state, 0.29)


def test_generation_mode_stops_on_entropy_and_never_relaxes():
    policy = AdaSDPolicy(16, 12, "generation")
    assert policy.stops_on_entropy and not policy.relaxes_verification
    state = observe_all(policy, [([0.1, 0.2], (2.0, 0.5)), ([0.3], (4.0, 0.9))])
    assert policy.next_num_draft_tokens(state, BATCH) == 12
    assert policy.generation_threshold(state) == pytest.approx(3.0)
    assert policy.draft_length(state, [1.0, 3.5, 0.0]) == 2
    assert policy.verification_threshold(state) == 0.0
    assert not policy.accepts_mismatch(state, 0.0)
    assert policy.count_accepted(state, [True, False, True], [0.5, 0.01, 0.0]) == 1


@pytest.mark.parametrize("window, planned", [(20, 5), (5, 5), (3, 3)])
def test_verification_mode_drafts_a_fixed_five_and_relaxes(window, planned):
    policy = AdaSDPolicy(20, window, "verification")
    assert not policy.stops_on_entropy and policy.relaxes_verification
    state = policy.new_state()
    assert policy.generation_threshold(state) == math.inf
    assert not policy.should_stop_drafting(state, 1e6)
    assert policy.next_num_draft_tokens(state, BATCH) == planned
    assert policy.draft_length(state, [9.0] * 10) == planned
    state = observe_all(policy, [([0.15], (1.0, 0.49))])
    assert policy.verification_threshold(state) == pytest.approx(0.32)
    assert policy.next_num_draft_tokens(state, BATCH) == planned


def test_verification_mode_refuses_more_tokens_than_it_drafts():
    policy = AdaSDPolicy(20, 20, "verification")
    policy.observe_verification(policy.new_state(), [0.1] * 4, (1.0, 0.5))
    with pytest.raises(ValueError, match=r"more than this policy drafts \(5\)"):
        policy.observe_verification(policy.new_state(), [0.1] * 5, (1.0, 0.5))


def test_modes_list():
    assert ADASD_MODES == ("both", "generation", "verification")


# -- interface and bad arguments ---------------------------------------------------
def test_contracts_route_learning_and_stops_through_the_narrow_contracts():
    policy = AdaSDPolicy(16, 16, "both")
    assert isinstance(policy, DraftLengthPolicy)
    # no confidence stop
    assert not isinstance(policy, ConfidenceStop)
    # it learns token by token at the rejection sampler, not from counts
    assert isinstance(policy, RelaxedVerifier) and policy.relaxes_verification
    state = policy.observe_verification(policy.new_state(), [0.1, 0.2], (2.5, 0.6))
    assert policy.observe(state, Verification("r", 0, 4, 2, num_reqs=1)) is state
    verdicts = TokenVerdicts(accepted_distances=(0.1, 0.2), rejected=(2.5, 0.6))
    assert policy.observe(policy.new_state(),
                          Verification("r", 0, 3, 2, verdicts=verdicts)) == state
    # its entropy stop is the threshold-stop contract's, at T_G
    assert isinstance(policy, ThresholdStop)
    assert policy.stop_measure == "entropy"
    assert policy.stop_threshold(state) == policy.generation_threshold(state) == 2.5
    assert AdaSDPolicy(16, 16, "verification").stop_measure is None
    assert not AdaSDPolicy(16, 16, "generation").relaxes_verification


def test_unknown_mode_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"adasd_mode='fast' is not allowed.*'both'"):
        AdaSDPolicy(16, 16, "fast")


@pytest.mark.parametrize("window", [0, -3, 17, 2.0, True, None])
def test_window_outside_one_to_cap_is_refused_naming_the_field(window):
    with pytest.raises(
        ValueError, match=rf"window={window!r} is not allowed.*\[1, num_speculative_tokens=16\]"
    ):
        AdaSDPolicy(16, window, "both")


def test_window_at_the_bounds_is_accepted():
    assert AdaSDPolicy(16, 1, "both").next_num_draft_tokens(AdaSDState(), BATCH) == 1
    assert AdaSDPolicy(16, 16, "both").next_num_draft_tokens(AdaSDState(), BATCH) == 16


def test_zero_cap_is_refused():
    with pytest.raises(ValueError, match="max_num_draft_tokens must be >= 1, got 0"):
        AdaSDPolicy(0, 1, "both")


@pytest.mark.parametrize(
    "accepted, rejected, message",
    [
        ([1.5], None, r"accepted JS distance=1\.5"),
        ([float("nan")], None, "accepted JS distance=nan"),
        ([-0.1], None, r"accepted JS distance=-0\.1"),
        ([], (-1.0, 0.5), r"rejected entropy=-1\.0"),
        ([], (float("inf"), 0.5), "rejected entropy=inf"),
        ([], (1.0, 2.0), r"rejected JS distance=2\.0"),
        ([0.1] * 4, (1.0, 0.5), r"4 accepted \+ 1 rejected draft tokens is more than"),
    ],
)
def test_bad_observations_are_refused(accepted, rejected, message):
    policy = AdaSDPolicy(16, 4, "both")
    with pytest.raises(ValueError, match=message):
        policy.observe_verification(policy.new_state(), accepted, rejected)
