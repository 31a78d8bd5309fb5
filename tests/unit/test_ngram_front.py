"""The n-gram front of the draft-model drafter (``drafter.ngram_front``): what
it looks up, how it splits a verification between the two sources, and the
drafts and probabilities it hands to vLLM. vLLM's lookup itself (numba) runs
only in the engine tests (``tests/e2e/test_ngram_then_model.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from vllm_gammatune.drafter.ngram_front import NgramFront
from vllm_gammatune.drafter.request_records import RequestRecords
from vllm_gammatune.policies import BatchView, CostAwarePolicy, FixedLinearCost


class RecordingLookup:
    """Stands in for vLLM's ``NgramProposer.propose``: keeps its inputs."""

    def __init__(self, offers):
        self.offers = offers
        self.calls = []

    def propose(self, k, sampled, num_tokens, token_ids):
        self.calls.append((k, sampled, num_tokens.copy(), token_ids.copy()))
        return self.offers


class RecordingCounters:
    def __init__(self):
        self.verifications = []

    def record_ngram_verification(self, drafted, accepted):
        self.verifications.append((drafted, accepted))


def front(offers=()):
    policy = CostAwarePolicy(8, target_cost=FixedLinearCost(0.1, 0.002),
                             draft_cost=FixedLinearCost(0.033, 0.0))
    return NgramFront(RecordingLookup(list(offers)), policy, RequestRecords(policy))


def test_the_lookup_sees_each_request_after_this_verification():
    token_ids = np.arange(40, dtype=np.int32).reshape(2, 20)
    runner = SimpleNamespace(input_batch=SimpleNamespace(
        num_tokens_no_spec=np.array([5, 8], dtype=np.int32), token_ids_cpu=token_ids))
    f = front([[1], []])
    # request 0 accepted 2 drafts (at positions 5, 6), then sampled 99;
    # request 1 is a prompt chunk whose sampled token is discarded
    offers = f.offers(runner, 4, accepted=[2, 0], next_token_ids=[99, 7],
                      discarded=[False, True])
    assert offers == [[1], []]
    k, sampled, num_tokens, tokens = f._lookup.calls[0]
    assert k == 4 and sampled == [[1], []]
    assert num_tokens.tolist() == [8, 9]
    assert tokens[0, :8].tolist() == [0, 1, 2, 3, 4, 5, 6, 99]
    assert tokens[1, :9].tolist() == [*range(20, 28), 7]


def test_a_verification_is_split_between_the_lookup_and_the_model():
    f = front()
    policy, records = f._policy, f._records
    for r in ("a", "b"):
        records.policy_state(r)
    f._free = {"a": 4}
    counters = RecordingCounters()
    model_rate = policy.acceptance.rate(records.policy_state("a"))
    # a: 4 free tokens, 3 accepted (4 valid); b: 2 of the model's, both accepted
    model_share = f.teach(["a", "b"], [4, 2], [4, 3], counters)
    assert model_share == [0, 2]
    assert counters.verifications == [(3 + 1, 3)]
    state = records.policy_state("a")
    assert state.free_drafts.accepted == 3 and state.free_drafts.rejections == 1
    assert policy.acceptance.rate(state) == model_rate  # the model's rate untouched
    # the hand-over is read once
    assert f.teach(["a", "b"], [4, 2], [4, 3], counters) == [4, 2]


def test_a_free_draft_whose_request_was_discarded_teaches_nothing():
    f = front()
    f._free = {"a": 3}
    counters = RecordingCounters()
    assert f.teach(["a"], [3], [0], counters) == [0]
    assert counters.verifications == []
    assert f._records.policy_state("a").free_drafts.accepted == 0


def test_the_chosen_free_drafts_are_remembered_for_their_verification():
    f = front()
    states = [f._records.policy_state(r) for r in ("a", "b")]
    for _ in range(6):
        f._policy.observe_free_draft(states[0], 8, 8)
    lengths = f.choose(["a", "b"], [[5] * 8, []], BatchView(batch_size=2))
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
