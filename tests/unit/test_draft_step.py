"""drafter.draft_step: one step's per-token stop, and what is cut and kept
after vLLM's draft loop (no engine: the loop is played pass by pass)."""

from __future__ import annotations

import pytest
import torch

from vllm_gammatune.drafter.draft_step import DraftStep, plan_draft_step
from vllm_gammatune.policies import AdaSDPolicy, AssistantThresholdPolicy, FixedDraftPolicy
from vllm_gammatune.verify.divergences import entropy_bits

CPU = torch.device("cpu")


def _rows(*rows) -> torch.Tensor:
    """[num_reqs, vocab] probability rows."""
    return torch.tensor(rows, dtype=torch.float32)


CONFIDENT = [0.9, 0.05, 0.05]
UNSURE = [0.4, 0.3, 0.3]


def _play(step: DraftStep, passes) -> list[bool]:
    """Feed ``(token_ids, distribution)`` per pass; what ``record`` answered."""
    answers = []
    for token_ids, distribution in passes:
        answers.append(step.record(torch.tensor(token_ids), None, distribution))
    return answers


def test_confidence_stop_ends_a_draft_after_its_first_unsure_token():
    step = DraftStep([3, 3], CPU, torch.tensor([0.5, 0.5]))
    answers = _play(step, [([1, 2], _rows(CONFIDENT, UNSURE)),
                           ([3, 4], _rows(UNSURE, CONFIDENT))])
    # row 1 stopped after pass 1, row 0 after pass 2: no third pass is needed
    assert answers == [False, True]
    assert step.lengths.tolist() == [2, 1]
    assert step.stopped_early.tolist() == [True, True]
    assert step.drafts() == [[1, 3], [2]]


def test_entropy_stop_keeps_the_token_that_crossed_the_threshold():
    # AdaSD's T_G (Algorithm 1 line 6): stop after a token whose entropy exceeds it
    step = DraftStep([3], CPU, torch.tensor([1.0]), stop_on="entropy", keep_entropies=True)
    assert float(entropy_bits(_rows(UNSURE))) > 1.0 > float(entropy_bits(_rows(CONFIDENT)))
    _play(step, [([5], _rows(CONFIDENT)), ([6], _rows(UNSURE)), ([7], _rows(CONFIDENT))])
    assert step.drafts() == [[5, 6]]
    kept = step.kept_drafts()[0]
    assert kept.distributions is None and kept.entropies.shape == (2,)


def test_plans_alone_never_end_the_loop_early():
    step = DraftStep([1, 3], CPU)
    assert not step.needs_distribution and not step.needs_token_probs
    assert _play(step, [([1, 2], None)] * 3) == [False] * 3
    assert step.drafts() == [[1], [2, 2, 2]] and not step.stopped_early.any()


def test_kept_drafts_and_traced_probs_are_cut_to_each_length():
    step = DraftStep([2, 1], CPU, keep_entropies=True, keep_distributions=True,
                     keep_token_probs=True)
    for token_ids, probs in (([1, 2], [0.9, 0.4]), ([3, 4], [0.8, 0.7])):
        step.record(torch.tensor(token_ids), torch.full((2, 3), 1 / 3),
                    _rows(CONFIDENT, UNSURE), torch.tensor(probs))
    first, second = step.kept_drafts()
    assert first.distributions.shape == (2, 3) and second.distributions.shape == (1, 3)
    assert first.distributions.dtype == torch.bfloat16
    assert second.entropies.shape == (1,)
    assert step.traced_token_probs() == [pytest.approx([0.9, 0.8]), pytest.approx([0.4])]
    # vLLM's draft probabilities: [num_reqs, passes run, vocab]
    assert step.draft_probs().shape == (2, 2, 3)


def test_no_draft_probs_without_vllms_probabilistic_drafting():
    step = DraftStep([1], CPU)
    step.record(torch.tensor([1]), None, None)
    assert step.draft_probs() is None


@pytest.mark.parametrize("policy, stop_on, thresholds, entropies, distributions", [
    (FixedDraftPolicy(8, 4), "confidence", None, False, False),
    (AssistantThresholdPolicy(8, 4, 0.6), "confidence", [0.6, 0.6], False, False),
    (AdaSDPolicy(8, window=8, mode="both"), "entropy", [0.0, 0.0], True, True),
    (AdaSDPolicy(8, window=8, mode="generation"), "entropy", [0.0, 0.0], True, False),
    (AdaSDPolicy(8, window=8, mode="verification"), "confidence", None, True, True),
])
def test_the_plan_sets_the_policys_stop_and_what_its_verification_keeps(
        policy, stop_on, thresholds, entropies, distributions):
    states = [policy.new_state(), policy.new_state()]
    step = plan_draft_step(policy, states, [3, 0], CPU, keep_token_probs=False)
    assert step.num_passes == 3 and step.planned.tolist() == [3, 0]
    assert step.stop_on == stop_on
    assert (None if step.stop_thresholds is None
            else step.stop_thresholds.tolist()) == (
        None if thresholds is None else pytest.approx(thresholds))
    assert (step.keep_entropies, step.keep_distributions) == (entropies, distributions)
    assert step.token_rule is None and not step.needs_token_probs


def test_the_padded_verification_keeps_every_pass_but_where_the_draft_kv_has_a_hole():
    """The CUDA hot path (``uniform_shape``): every request keeps every token
    the loop produced, its plan shorter or 0 alike, but a request at 0 whose
    draft KV has a hole (``keeps_every_pass`` False for it)."""
    step = DraftStep([1, 3, 0, 0], CPU, early_exit=False,
                     keeps_every_pass=[True, True, True, False])
    assert _play(step, [([1, 2, 3, 4], None)] * 3) == [False] * 3
    assert step.drafts() == [[1, 1, 1], [2, 2, 2], [3, 3, 3], []]
    assert step.stopped_early_host == [False] * 4


def test_a_step_that_keeps_every_pass_has_no_stop():
    """A confidence stop (GammaTune+, AssistantThreshold) and the cost-aware
    per-token rule decide nothing where every pass is kept: the plan leaves
    them out."""
    from vllm_gammatune.policies import CostAwarePolicy

    for policy in (AssistantThresholdPolicy(8, 4, 0.6), CostAwarePolicy(8)):
        states = [policy.new_state(), policy.new_state()]
        step = plan_draft_step(policy, states, [3, 1], CPU, keep_token_probs=False,
                               early_exit=False, keeps_every_pass=[True, True])
        assert step.stop_thresholds is None and step.token_rule is None
        assert not step.needs_token_probs and not step.needs_distribution
        with pytest.raises(AssertionError, match="no stop"):
            DraftStep([3, 1], CPU, torch.tensor([0.5, 0.5]), early_exit=False,
                      keeps_every_pass=[True, True])


def test_a_draft_cut_to_0_is_padded_with_the_tokens_its_probabilities_proposed():
    """The padded row of a request that keeps no draft token (at 0 with a
    draft-KV hole) holds the tokens the loop sampled from the probabilities
    vLLM's rejection sampler reads, not fillers those rows never proposed;
    verification keeps none of it."""
    from vllm_gammatune.drafter.uniform_shape import UniformShape

    step = DraftStep([3, 0], CPU, early_exit=False, keeps_every_pass=[True, False])
    _play(step, [([5, 7], None)] * 2)
    shape = UniformShape()
    probs = torch.full((2, 2, 9), 1 / 9)
    padded, wider = shape.pad(["a", "b"], step.drafts(), step.loop_tokens(), 3, probs)
    assert padded == [[5, 5, 5], [7, 7, 7]]
    assert shape.verified_lengths(["a", "b"], [3, 3]) == [2, 0]
    # the filler past the two passes is proposed with certainty
    assert wider[:, 2].tolist() == [[0.0] * 5 + [1.0] + [0.0] * 3,
                                    [0.0] * 7 + [1.0] + [0.0]]


def test_verified_lengths_follow_each_request_whatever_the_verification_order():
    """vLLM may reorder its input batch between the step that drafted and
    the one that verifies (a request leaves, one arrives): each request
    keeps its own drafted length, a request that did not draft keeps what
    vLLM scheduled, and nothing is kept past what vLLM scheduled."""
    from vllm_gammatune.drafter.uniform_shape import UniformShape

    shape = UniformShape()
    assert shape.verified_lengths(["a"], [3]) is None  # nothing padded yet
    shape.pad(["a", "b", "c"], [[1, 2], [3], [4, 5, 6]], [[1, 2, 9], [3, 9, 9], [4, 5, 6]],
              3, None)
    assert shape.verified_lengths(["a", "b", "c"], [3, 3, 3]) == [2, 1, 3]
    assert shape.verified_lengths(["c", "a", "b"], [3, 3, 3]) == [3, 2, 1]
    assert shape.verified_lengths(["c", "d", "a"], [3, 0, 1]) == [3, 0, 1]
    shape.clear()
    assert shape.verified_lengths(["a", "b", "c"], [3, 3, 3]) is None
