"""verify.adasd_verifier: Algorithm 1's verification against the drafter's
records, without an engine (AdaSD paper, Algorithm 1 lines 8-19)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm")

from vllm_gammatune.drafter.observations import deliver  # noqa: E402
from vllm_gammatune.drafter.request_records import RequestRecords  # noqa: E402
from vllm_gammatune.policies import AdaSDPolicy, AdaSDState  # noqa: E402
from vllm_gammatune.verify.adasd_verifier import AdaSDVerifier  # noqa: E402
from vllm_gammatune.verify.divergences import entropy_bits  # noqa: E402
from vllm_gammatune.verify.kept_draft import KeptDraft  # noqa: E402

GREEDY = SimpleNamespace(all_greedy=True, temperature=None, generators={})
#: T_V = (0.2 + 0.6) / 2 = 0.4
LEARNED = AdaSDState(num_accepted=1, accepted_distance_sum=0.2, num_rejected=1,
                     rejected_entropy_sum=1.0, rejected_distance_sum=0.6)


class _Counters:
    def __init__(self):
        self.calls = []

    def record_verification(self, num_relaxed, generation_thresholds,
                            verification_thresholds):
        self.calls.append((num_relaxed, generation_thresholds, verification_thresholds))


def _logits(*favourites: int, vocab: int = 4) -> torch.Tensor:
    """[len(favourites), vocab]: each row strongly prefers its token."""
    rows = torch.zeros(len(favourites), vocab)
    for i, token in enumerate(favourites):
        rows[i, token] = 6.0
    return rows


def _kept(logits: torch.Tensor, with_distributions: bool = True) -> KeptDraft:
    q = torch.softmax(logits, dim=-1)
    return KeptDraft(q.to(torch.bfloat16) if with_distributions else None, entropy_bits(q))


def _setup(mode: str):
    policy = AdaSDPolicy(4, window=4, mode=mode)
    records = RequestRecords(policy)
    counters = _Counters()
    return policy, records, counters, AdaSDVerifier(policy, records, counters)


def _learn(policy, records, verifier):
    """The drafter's next observation: the step's verifications (of drafts
    planned at step 0) reach the policy before the plan of step 1."""
    deliver(policy, records, 1, verifier.take_verifications(0))


def _never_called(*args, **kwargs):
    raise AssertionError("vLLM's rejection sampling is not needed here")


def test_relaxed_verification_accepts_a_close_mismatch_and_learns():
    policy, records, counters, verifier = _setup("both")
    records.set_policy_state("a", LEARNED)
    # "a": [1, 2] drafted; the target emits 1, then prefers 3 where the draft
    # said 2, but the draft's distribution there is the target's: relaxed
    target = _logits(1, 3, 0)
    records.keep_draft("a", _kept(target[:2]))
    # "b": [2] drafted, the target prefers 0; T_V = 0 (nothing learned): rejected
    records.keep_draft("b", _kept(_logits(2)))
    output = verifier.rejection_sample(
        ["a", "b"], _never_called, torch.tensor([1, 2, 2]), [2, 1], 2,
        torch.tensor([2, 3]), None, target, torch.tensor([[7], [8]]), GREEDY)
    assert output.tolist() == [[1, 2, 7], [0, -1, -1]]
    # both kept drafts are consumed; each request learned from its tokens
    assert records.num_kept_drafts == 0
    _learn(policy, records, verifier)
    assert records.policy_state("a").num_accepted == 3
    assert records.policy_state("b").num_rejected == 1
    relaxed, thresholds_g, thresholds_v = counters.calls[0]
    assert relaxed == 1 and thresholds_v == [pytest.approx(0.4), 0.0]
    assert thresholds_g == [policy.stop_threshold(LEARNED),
                            policy.stop_threshold(AdaSDState())]


def test_generation_only_keeps_vllms_result_and_learns_the_rejected_entropy():
    policy, records, counters, verifier = _setup("generation")
    draft = _logits(1, 2)
    records.keep_draft("a", _kept(draft, with_distributions=False))
    standard = torch.tensor([[1, 3, -1]], dtype=torch.int32)  # one accepted, then 3
    calls = []

    def original(*args, **kwargs):
        calls.append(args)
        return standard

    target = _logits(1, 3)
    output = verifier.rejection_sample(["a"], original, torch.tensor([1, 2]), [2], 2,
                                       torch.tensor([2]), None, target,
                                       torch.tensor([[7]]), GREEDY)
    assert output.tolist() == standard.tolist() and len(calls) == 1
    assert calls[0][5] is not target  # vLLM may modify the logits it is given
    _learn(policy, records, verifier)
    state = records.policy_state("a")
    assert state.num_accepted == 1 and state.num_rejected == 1
    assert state.rejected_entropy_sum == pytest.approx(float(_kept(draft).entropies[1]))
    assert counters.calls[0][0] == 0


def test_a_draft_without_kept_distributions_is_verified_exactly_and_teaches_nothing():
    policy, records, counters, verifier = _setup("both")
    records.set_policy_state("a", LEARNED)
    standard = torch.tensor([[1, 5, -1]], dtype=torch.int32)
    output = verifier.rejection_sample(["a"], lambda *a, **kw: standard,
                                       torch.tensor([1, 2]), [2], 2, torch.tensor([2]),
                                       None, _logits(1, 3, 0), torch.tensor([[7]]), GREEDY)
    assert output.tolist() == standard.tolist()
    _learn(policy, records, verifier)
    assert records.policy_state("a") == LEARNED
    assert counters.calls == [(0, [], [])]


def test_a_request_without_drafts_emits_its_bonus_token():
    _, records, counters, verifier = _setup("both")
    output = verifier.rejection_sample(["a"], _never_called, torch.tensor([], dtype=torch.long),
                                       [0], 1, torch.tensor([0]), None, _logits(0),
                                       torch.tensor([[9]]), GREEDY)
    assert output.tolist() == [[9, -1]]
    assert "a" not in records
