"""drafter.request_records: one record per request, one sweep."""

from __future__ import annotations

from vllm_gammatune.drafter.request_records import RequestRecords
from vllm_gammatune.policies import GammaTunePolicy, StepObservation, Verification


def _records(also_forget=()):
    return RequestRecords(GammaTunePolicy(16, 4, 1, 0.5, 2), also_forget)


def test_state_is_created_on_first_use_and_kept():
    records = _records()
    state = records.policy_state("a")
    assert state.gamma == 4 and len(records) == 1
    records.set_policy_state("a", records.policy.observe(state, Verification("a", 0, 4, 4)))
    assert records.policy_state("a").gamma == 5
    assert records.find("b") is None and "b" not in records  # find makes nothing


def test_kept_draft_is_read_until_its_verification_closes():
    records = _records()
    kept = object()
    assert records.kept_draft("a") is None and "a" not in records  # reading makes nothing
    records.keep_draft("a", kept)
    assert records.kept_draft("a") is kept and records.num_kept_drafts == 1
    records.close_verification("a")
    assert records.kept_draft("a") is None and records.num_kept_drafts == 0
    # what the verification teaches reaches the state through the policy's
    # observation, which writes the records' states
    records.policy.observe_step(StepObservation(1, (Verification("a", 0, 4, 4),)),
                                records.policy_states)
    learned = records.policy_state("a")
    assert learned.gamma == 5
    # an exact fallback learns nothing: the state stays
    records.keep_draft("a", kept)
    records.close_verification("a")
    assert records.kept_draft("a") is None and records.policy_state("a") is learned


def test_traced_token_probs_are_taken_once():
    records = _records()
    assert records.take_traced_token_probs("a") is None
    records.keep_traced_token_probs("a", [0.9, 0.5])
    assert records.take_traced_token_probs("a") == [0.9, 0.5]
    assert records.take_traced_token_probs("a") is None


def test_one_sweep_keeps_live_and_preempted_drops_finished_and_tells_the_others():
    told = []
    records = _records(also_forget=(told.append,))
    for req_id in ("a", "b", "c"):
        records.keep_draft(req_id, object())
        records.keep_traced_token_probs(req_id, [0.5])
    # "b" finished; "c" is preempted but still in the runner's requests
    live = {"a": 1, "c": 2}
    assert records.forget_missing(live) == 1
    assert sorted(records) == ["a", "c"] and records.num_kept_drafts == 2
    assert records.take_traced_token_probs("b") is None
    assert told == [live]


def test_memory_flat_over_thousands_of_requests():
    records = _records()
    live = set()
    for i in range(5000):
        live.add(str(i))
        records.policy_state(str(i))
        if len(live) > 8:
            live.discard(str(i - 8))
        records.forget_missing(live)
        assert len(records) <= 8
    assert len(records) == len(live)
