"""verify.device_verification: AdaSD's verification on the device (the CUDA
hot path) gives the host verification's output tokens and learned states for
the same inputs, reads nothing on the host, and learns once the drafter has
read its results with the step (AdaSD paper, Algorithm 1 lines 8-19)."""

from __future__ import annotations

import contextlib
import math
import sys
from types import SimpleNamespace
from unittest import mock

import numpy
import pytest
import torch

pytest.importorskip("vllm")

from vllm_gammatune.drafter.contract import PluginDrafter  # noqa: E402
from vllm_gammatune.drafter.draft_step import DraftStep  # noqa: E402
from vllm_gammatune.drafter.observations import deliver  # noqa: E402
from vllm_gammatune.drafter.request_records import RequestRecords  # noqa: E402
from vllm_gammatune.integration.sampling import (  # noqa: E402
    rejection_sample_step,
    sample_step,
)
from vllm_gammatune.policies import AdaSDPolicy, AdaSDState  # noqa: E402
from vllm_gammatune.verify.adasd_verifier import AdaSDVerifier  # noqa: E402
from vllm_gammatune.verify.divergences import entropy_bits, js_distance  # noqa: E402
from vllm_gammatune.verify.kept_draft import KeptDraft  # noqa: E402

VOCAB = 12
MAX_SPEC_LEN = 4
#: T_V = (0.05 + 0.15) / 2 = 0.1, among the distances of these batches: some
#: mismatches are accepted, others rejected
LEARNED = AdaSDState(num_accepted=1, accepted_distance_sum=0.05, num_rejected=1,
                     rejected_entropy_sum=1.0, rejected_distance_sum=0.15)
#: (req_id, draft tokens, greedy, seeded, kept draft, learned state): greedy
#: and sampled requests (seeded, and on the global generator), a request with
#: 0 drafts, one whose draft was not kept, and one with nothing learned yet
REQUESTS = [
    ("greedy", 4, True, False, True, LEARNED),
    ("seeded", 3, False, True, True, LEARNED),
    ("unseeded", 2, False, False, True, LEARNED),
    ("no_drafts", 0, True, False, False, LEARNED),
    ("not_kept", 2, True, False, False, LEARNED),
    ("cold", 3, True, False, True, None),
]
GREEDY = SimpleNamespace(all_greedy=True, temperature=None, generators={})
READING_METHODS = ("tolist", "item", "cpu", "numpy", "__bool__", "__int__", "__float__",
                   "__index__")


def _counter_calls(counters: mock.Mock) -> list:
    """The (relaxed acceptances, T_G list, T_V list) of each verification counted."""
    return [c.args for c in counters.record_verification.call_args_list]


def _batch(seed: int, mode: str):
    """One step's inputs: drafts sampled from a draft close to the target,
    so that some mismatches are close enough to be relaxed."""
    gen = torch.Generator().manual_seed(seed)
    num_draft_tokens = [n for _, n, *_ in REQUESTS]
    num_tokens = sum(num_draft_tokens)
    target_logits = 3 * torch.randn(num_tokens, VOCAB, generator=gen)
    draft_logits = target_logits + 0.5 * torch.randn(num_tokens, VOCAB, generator=gen)
    q = torch.softmax(draft_logits, dim=-1)
    draft_token_ids = torch.multinomial(q, 1, generator=gen).view(-1).to(torch.int32)
    kept, start = {}, 0
    for req_id, n, _, _, keeps, _ in REQUESTS:
        if keeps:
            rows = q[start:start + n]
            kept[req_id] = KeptDraft(
                rows.to(torch.bfloat16) if mode != "generation" else None, entropy_bits(rows))
        start += n
    bonus = torch.randint(0, VOCAB, (len(REQUESTS), 1), generator=gen, dtype=torch.int32)
    return num_draft_tokens, target_logits, draft_token_ids, kept, bonus


def _lossless(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens,
              draft_probs, target_logits, bonus_token_ids, sampling_metadata, **kwargs):
    """Stands in for vLLM's rejection sampling: the greedy lossless result."""
    output = torch.full((len(num_draft_tokens), max_spec_len + 1), -1, dtype=torch.int32)
    best = target_logits.argmax(dim=-1).tolist()
    drafts = draft_token_ids.tolist()
    start = 0
    for r, n in enumerate(num_draft_tokens):
        for i in range(n):
            output[r, i] = best[start + i]
            if drafts[start + i] != best[start + i]:
                break
        else:
            output[r, n] = int(bonus_token_ids[r, 0])
        start += n
    return output


@contextlib.contextmanager
def _host_reads_by_the_plugin():
    """The reads of a tensor's values whose caller is the plugin (a list,
    filled until the block ends)."""
    reads = []
    originals = {name: getattr(torch.Tensor, name) for name in READING_METHODS}

    def wrap(name):
        def reading(self, *args, **kwargs):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.startswith("vllm_gammatune"):
                reads.append(f"{caller}:{sys._getframe(1).f_lineno} {name}")
            return originals[name](self, *args, **kwargs)
        return reading

    for name in READING_METHODS:
        setattr(torch.Tensor, name, wrap(name))
    try:
        yield reads
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def _verify(mode: str, seed: int, on_device: bool):
    """Verify one step with fresh records; (output, records, counters, verifier).
    On the host, the policy has learned from it (the drafter's next
    observation); on the device, it learns once the results are read
    (``_learn``)."""
    num_draft_tokens, target_logits, draft_token_ids, kept, bonus = _batch(seed, mode)
    policy = AdaSDPolicy(MAX_SPEC_LEN, window=MAX_SPEC_LEN, mode=mode)
    records, counters = RequestRecords(policy), mock.Mock(spec=["record_verification"])
    for req_id, _, _, _, _, state in REQUESTS:
        if state is not None:
            records.set_policy_state(req_id, state)
        if req_id in kept:
            records.keep_draft(req_id, kept[req_id])
    greedy = [g for _, _, g, *_ in REQUESTS]
    metadata = SimpleNamespace(
        all_greedy=False,
        temperature=torch.tensor([0.0 if g else 0.8 for g in greedy]),
        generators={r: torch.Generator().manual_seed(100 + seed)
                    for r, (*_, seeded, _, _) in enumerate(REQUESTS) if seeded})
    verifier = AdaSDVerifier(policy, records, counters, on_device=on_device)
    cu_num_draft_tokens = torch.tensor(num_draft_tokens).cumsum(0)
    torch.manual_seed(1000 + seed)  # the unseeded request's generator
    args = ([r for r, *_ in REQUESTS], _lossless, draft_token_ids,
            num_draft_tokens, MAX_SPEC_LEN, cu_num_draft_tokens, None, target_logits, bonus,
            metadata)
    if on_device:
        with _host_reads_by_the_plugin() as reads:
            output = verifier.rejection_sample(*args, greedy=greedy)
        assert reads == []
    else:
        output = verifier.rejection_sample(*args)
        deliver(policy, records, 1, verifier.take_verifications(0))
    return output, records, counters, verifier


def _learn(verifier, records, read):
    """The drafter reads the device's results with the step's drafts, and
    hands their verifications (of drafts planned at step 0) to the policy
    in its next observation."""
    deliver(verifier.policy, records, 1, verifier.read_verifications(read, 0))


def _initial_states():
    return {req_id: state or AdaSDState() for req_id, *_, state in REQUESTS}


def _states(records: RequestRecords):
    return {req_id: records.policy_state(req_id) for req_id, *_ in REQUESTS}


@pytest.mark.parametrize("mode", ["both", "verification", "generation"])
def test_the_device_verification_gives_the_host_verifications_tokens_and_states(mode):
    relaxed = 0
    for seed in range(6):
        host_output, host_records, host_counters, _ = _verify(mode, seed, on_device=False)
        output, records, counters, verifier = _verify(mode, seed, on_device=True)
        assert output.tolist() == host_output.tolist()
        # nothing learned before the drafter reads the results; the kept drafts went
        assert _states(records) == _initial_states()
        assert records.num_kept_drafts == 0 and _counter_calls(counters) == []
        _learn(verifier, records, [results.tolist() for results in verifier.unread_results()])
        assert _states(records) == _states(host_records)
        assert _counter_calls(counters) == _counter_calls(host_counters)
        assert verifier.unread_results() == []
        relaxed += _counter_calls(host_counters)[0][0]
    # the inputs exercise the relaxation where the mode has one
    assert (relaxed > 0) == (mode != "generation")


@pytest.mark.parametrize("above", [False, True])
def test_a_mismatch_at_exactly_t_v_is_rejected_on_both_paths(above):
    """Line 11 is strict: d_JS < T_V; at equality the mismatch is rejected."""
    target_logits = torch.tensor([[2.0, 1.0, 0.0]])
    q = torch.softmax(torch.tensor([[1.0, 2.0, 0.0]]), dim=-1).to(torch.bfloat16)
    distance = float(js_distance(torch.softmax(target_logits, dim=-1), q.float())[0])
    threshold = math.nextafter(distance, 1.0) if above else distance
    # T_V = (threshold + threshold) / 2 == threshold exactly
    state = AdaSDState(num_accepted=1, accepted_distance_sum=threshold, num_rejected=1,
                       rejected_entropy_sum=1.0, rejected_distance_sum=threshold)
    outputs = []
    for on_device in (False, True):
        policy = AdaSDPolicy(2, window=2, mode="both")
        records = RequestRecords(policy)
        records.set_policy_state("a", state)
        records.keep_draft("a", KeptDraft(q, entropy_bits(q.float())))
        verifier = AdaSDVerifier(policy, records, None, on_device=on_device)
        # the draft says 1, the target's argmax is 0
        outputs.append(verifier.rejection_sample(
            ["a"], None, torch.tensor([1]), [1], 1, torch.tensor([1]), None, target_logits,
            torch.tensor([[2]]), GREEDY, greedy=[True]).tolist())
    assert outputs[0] == outputs[1] == ([[1, 2]] if above else [[0, -1]])


def test_the_results_are_read_with_the_step_in_one_read_and_learned_after_it():
    output, records, counters, verifier = _verify("both", seed=0, on_device=True)
    step = DraftStep([2, 1], torch.device("cpu"), early_exit=False)
    for token_ids in ([5, 6], [7, 8]):
        step.record(torch.tensor(token_ids), None, None)
    unread = verifier.unread_results()
    with _host_reads_by_the_plugin() as reads:
        read = step.read_back(extra=unread)
    assert len(reads) == 1
    assert step.drafts() == [[5, 7], [6]] and read.valid_counts is None
    assert read.extra == [results.tolist() for results in unread]
    _learn(verifier, records, read.extra)
    host_output, host_records, host_counters, _ = _verify("both", seed=0, on_device=False)
    assert _states(records) == _states(host_records)
    assert _counter_calls(counters) == _counter_calls(host_counters)


def test_verifications_not_yet_read_wait_and_a_request_that_left_learns_nothing():
    policy = AdaSDPolicy(2, window=2, mode="both")
    records = RequestRecords(policy)
    verifier = AdaSDVerifier(policy, records, None, on_device=True)
    target_logits = torch.tensor([[4.0, 0.0, 0.0]])
    q = torch.softmax(torch.tensor([[0.0, 4.0, 0.0]]), dim=-1)
    for _ in range(2):  # two steps verified before the drafter reads (no draft pass)
        for req_id in ("a", "b"):
            records.keep_draft(req_id, KeptDraft(q.to(torch.bfloat16), entropy_bits(q)))
        verifier.rejection_sample(["a", "b"], None, torch.tensor([1, 1]), [1, 1], 1,
                                  torch.tensor([1, 2]), None, target_logits.repeat(2, 1),
                                  torch.tensor([[2], [2]]), GREEDY, greedy=[True, True])
    assert len(verifier.unread_results()) == 2
    records.forget_missing(["a"])
    _learn(verifier, records, [results.tolist() for results in verifier.unread_results()])
    # both rejections are learned, in order; "b" left and is not brought back
    assert records.policy_state("a").num_rejected == 2 and "b" not in records


def test_the_step_hands_the_device_verifier_each_requests_greedy_flag():
    verifier = SimpleNamespace(on_device=True, calls=[])

    def rejection_sample(req_ids, original, *args, greedy=None, **kwargs):
        verifier.calls.append((req_ids, greedy))

    verifier.rejection_sample = rejection_sample

    class Drafter(PluginDrafter):
        adasd_verifier = verifier
        counters = None

        def forget_finished(self, live_req_ids):
            pass

    runner = SimpleNamespace(
        drafter=Drafter(),
        # vLLM's host copy of the temperatures: 0 for a greedy request, and
        # stale entries past the batch's requests
        input_batch=SimpleNamespace(req_ids=["a", "b", "c"],
                                    temperature_cpu=numpy.array([0.0, 0.7, 0.0, 0.5])))

    def original_sample(runner, logits, spec_decode_metadata):
        return rejection_sample_step(lambda *a, **kw: "original")

    sample_step(original_sample, runner, "logits",
                SimpleNamespace(max_spec_len=2, num_draft_tokens=[2, 1, 0]))
    assert verifier.calls == [(["a", "b", "c"], [True, False, True])]
