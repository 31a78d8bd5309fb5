from vllm_gammatune.policies import GammaTunePolicy
from vllm_gammatune.drafter.request_states import RequestStateTable
from vllm_gammatune.policies import BatchView


def test_state_is_created_on_first_use_and_kept():
    table = RequestStateTable(GammaTunePolicy(16, 4, 1, 0.5, 2))
    state = table.get("a")
    assert state.gamma == 4 and len(table) == 1
    table.set("a", table.policy.observe(state, 4, 4, BatchView(1)))
    assert table.get("a").gamma == 5


def test_forget_missing_keeps_live_and_preempted_drops_finished():
    table = RequestStateTable(GammaTunePolicy(16, 4, 1, 0.5, 2))
    for req_id in ("a", "b", "c"):
        table.get(req_id)
    # "b" finished; "c" is preempted but still in the runner's requests
    assert table.forget_missing({"a": 1, "c": 2}) == 1
    assert "b" not in table and "a" in table and "c" in table


def test_memory_flat_over_thousands_of_requests():
    table = RequestStateTable(GammaTunePolicy(16, 4, 1, 0.5, 2))
    live = set()
    for i in range(5000):
        live.add(str(i))
        table.get(str(i))
        if len(live) > 8:
            live.discard(str(i - 8))
        table.forget_missing(live)
        assert len(table) <= 8
    assert len(table) == len(live)
