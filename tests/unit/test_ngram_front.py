"""The n-gram front of the draft-model drafter (``drafter.ngram_front``): what
it looks up, how it splits a verification between the two sources, and the
drafts and probabilities it hands to vLLM. vLLM's lookup itself (numba) runs
only in the engine tests (``tests/e2e/test_ngram_then_model.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from vllm_gammatune.drafter.ngram_front import NgramFront
from vllm_gammatune.drafter.observations import deliver
from vllm_gammatune.drafter.request_records import RequestRecords
from vllm_gammatune.policies import (
    BatchView,
    CostAwarePolicy,
    DraftSource,
    FixedLinearCost,
    Verification,
)


class RecordingMatcher:
    """Stands in for vLLM's per-request matcher: keeps its inputs and
    answers with the given offers in turn."""

    def __init__(self, offers):
        self.offers = list(offers)
        self.calls = []

    def __call__(self, tokens, min_n, max_n, max_model_len, k):
        self.calls.append((tokens.tolist(), min_n, max_n, max_model_len, k))
        return np.array(self.offers.pop(0), dtype=np.int32)


class RecordingCounters:
    def __init__(self):
        self.verifications = []

    def record_ngram_verification(self, drafted, accepted):
        self.verifications.append((drafted, accepted))


def front(offers=()):
    policy = CostAwarePolicy(8, target_cost=FixedLinearCost(0.1, 0.002),
                             draft_cost=FixedLinearCost(0.033, 0.0))
    bounds = {"prompt_lookup_min": 2, "prompt_lookup_max": 4}
    return NgramFront(RecordingMatcher(offers), bounds, 4096, policy, RequestRecords(policy))


def runner_with(token_ids, num_tokens):
    return SimpleNamespace(input_batch=SimpleNamespace(
        num_tokens_no_spec=np.array(num_tokens, dtype=np.int32), token_ids_cpu=token_ids))


def test_the_lookup_sees_each_request_after_this_verification():
    runner = runner_with(np.arange(40, dtype=np.int32).reshape(2, 20), [5, 8])
    f = front([[1, 2]])
    # request a accepted 2 drafts (at positions 5, 6), then sampled 99;
    # request b is a prompt chunk whose sampled token is discarded
    offers, scored = f.offers(runner, ["a", "b"], 4, accepted=[2, 0],
                              next_token_ids=[99, 7], discarded=[False, True], step=0)
    assert offers == [[1, 2], []] and scored == []
    assert f._match.calls == [([0, 1, 2, 3, 4, 5, 6, 99], 2, 4, 4096, 4)]


def test_an_unverified_offer_learns_from_the_tokens_the_target_emitted():
    f = front([[5, 6, 7], [8, 9, 10, 11], [1], [2], [3]])
    records, policy = f._records, f._policy
    runner = runner_with(np.zeros((3, 20), dtype=np.int32), [4, 4, 4])
    ids = ["a", "b", "c"]
    offers, _ = f.offers(runner, ids, 4, [0, 0, 0], [0, 0, 0], [False, False, True], 0)
    # the draft model has been right for a and b: it drafts for them
    for r in ("a", "b"):
        for _ in range(6):
            policy.observe(records.policy_state(r), Verification(r, 0, 8, 8, num_reqs=3))
    model_rate = policy.acceptance.rate(records.policy_state("a").acceptance)
    assert f.choose(ids, offers, BatchView(num_reqs=3)) == [0, 0, 0]
    assert f._unverified == {"a": [5, 6, 7], "b": [8, 9, 10, 11]}
    # this step the target emitted, after the 4 committed tokens: for a, 3
    # accepted drafts (5, 6, 9) and 4; for b, 1 accepted draft (8) and 9
    tokens = np.zeros((3, 20), dtype=np.int32)
    tokens[0, 4:7] = [5, 6, 9]
    tokens[1, 4:5] = [8]
    _, scored = f.offers(runner_with(tokens, [4, 4, 4]), ids, 4, [3, 1, 0], [4, 9, 0],
                         [False, False, True], 1)
    # a: 5, 6 matched, 7 would have been rejected; b: the emitted 8, 9 matched,
    # the rest of the offer is unknown
    assert scored == [
        Verification("a", 1, 3, 2, num_reqs=3, source=DraftSource.FREE),
        Verification("b", 1, 2, 2, num_reqs=3, source=DraftSource.FREE)]
    deliver(policy, records, 2, scored)  # the step's observation, before its plan
    a, b = (records.policy_state(r).free_drafts for r in ("a", "b"))
    assert (a.accepted, a.rejections) == (2, 1)
    assert (b.accepted, b.rejections) == (2, 0)
    assert policy.acceptance.rate(records.policy_state("a").acceptance) == model_rate
    # learnt once: the next step has nothing left unverified from this one
    assert f._unverified == {}


def test_a_step_the_front_did_not_see_drops_what_it_handed_over():
    f = front()
    f._free, f._unverified = {"a": 2}, {"b": [1]}
    f.forget_step()
    assert f._free == {} and f._unverified == {}


def test_a_verification_is_split_between_the_lookup_and_the_model():
    f = front()
    policy, records = f._policy, f._records
    for r in ("a", "b"):
        records.policy_state(r)
    f._free = {"a": 4}
    counters = RecordingCounters()
    model_rate = policy.acceptance.rate(records.policy_state("a").acceptance)
    # a: 4 free tokens, 3 accepted (4 valid); b: 2 of the model's, both accepted
    model_share, free = f.teach(["a", "b"], [4, 2], [4, 3], counters, 0)
    assert model_share == [0, 2]
    assert free == [Verification("a", 0, 4, 3, num_reqs=2, source=DraftSource.FREE)]
    assert counters.verifications == [(3 + 1, 3)]
    deliver(policy, records, 1, free)
    state = records.policy_state("a")
    assert state.free_drafts.accepted == 3 and state.free_drafts.rejections == 1
    # the model's rate untouched
    assert policy.acceptance.rate(state.acceptance) == model_rate
    # the hand-over is read once
    assert f.teach(["a", "b"], [4, 2], [4, 3], counters, 1) == ([4, 2], [])


def test_a_free_draft_whose_request_was_discarded_teaches_nothing():
    f = front()
    f._free = {"a": 3}
    counters = RecordingCounters()
    model_share, free = f.teach(["a"], [3], [0], counters, 0)
    assert model_share == [0] and free == []
    assert counters.verifications == []
    deliver(f._policy, f._records, 1, free)
    assert f._records.policy_state("a").free_drafts.accepted == 0


def test_the_chosen_free_drafts_are_remembered_for_their_verification():
    f = front()
    states = [f._records.policy_state(r) for r in ("a", "b")]
    for _ in range(6):
        f._policy.observe(states[0], Verification("a", 0, 8, 8, source=DraftSource.FREE))
    lengths = f.choose(["a", "b"], [[5] * 8, []], BatchView(num_reqs=2))
    assert lengths == [8, 0] and f._free == {"a": 8}


def test_free_drafts_replace_the_models_and_get_one_hot_probabilities():
    drafts = NgramFront.merge([[], [7, 8]], [[1, 2, 3], [9]], [3, 0])
    assert drafts == [[1, 2, 3], [7, 8]]
    # the model ran 2 passes; the free draft is 3 long: the rows widen
    probs = torch.full((2, 2, 5), 0.2)
    merged = NgramFront.probs_with_free_rows(probs, drafts, [3, 0])
    assert merged.shape == (2, 3, 5)
    assert merged[0].tolist() == [[0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0]]
    assert torch.allclose(merged[1, :2], torch.full((2, 5), 0.2))
