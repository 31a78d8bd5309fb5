"""lifecycle: finished requests' state goes when the worker hears of them."""

from types import SimpleNamespace

from vllm_gammatune.integration.lifecycle import update_states_and_forget_finished
from vllm_gammatune.drafter.proposer import AdaptiveDraftModelProposer
from vllm_gammatune.policies import GammaTunePolicy
from vllm_gammatune.drafter.request_states import RequestStateTable


class _Counters:
    tracked = None

    def set_tracked_requests(self, n):
        self.tracked = n


def _runner(req_ids):
    table = RequestStateTable(GammaTunePolicy(16, 4, 1, 0.5, 2))
    for req_id in req_ids:
        table.get(req_id)
    holes = SimpleNamespace(live=None)
    holes.forget_missing = lambda live: setattr(holes, "live", set(live))
    drafter = SimpleNamespace(request_states=table, _counters=_Counters(), draft_kv_holes=holes,
                              pending_drafts={r: None for r in req_ids},
                              traced_token_probs={r: [0.5] for r in req_ids})
    # the plugin drafter's own sweep, on this stand-in
    drafter.forget_requests_not_in = (
        lambda live: AdaptiveDraftModelProposer.forget_requests_not_in(drafter, live))
    return SimpleNamespace(drafter=drafter, requests={r: object() for r in req_ids})


def _update_states(runner, scheduler_output):  # what vLLM's method does to `requests`
    for req_id in scheduler_output.finished_req_ids:
        runner.requests.pop(req_id, None)
    return "result"


def test_finished_requests_dropped_preempted_kept_gauge_updated():
    runner = _runner(["a", "b", "c"])
    # "b" finished; "c" is preempted (not finished: still in runner.requests)
    out = update_states_and_forget_finished(
        _update_states, runner, SimpleNamespace(finished_req_ids={"b"}))
    assert out == "result"
    table = runner.drafter.request_states
    assert "b" not in table and "a" in table and "c" in table
    assert set(runner.drafter.pending_drafts) == {"a", "c"}
    assert set(runner.drafter.traced_token_probs) == {"a", "c"}
    assert runner.drafter.draft_kv_holes.live == {"a", "c"}
    assert runner.drafter._counters.tracked == 2


def test_idle_step_empties_the_table():
    runner = _runner(["a", "b"])
    update_states_and_forget_finished(
        _update_states, runner, SimpleNamespace(finished_req_ids={"a", "b"}))
    assert len(runner.drafter.request_states) == 0
    assert runner.drafter._counters.tracked == 0


def test_finished_id_resubmitted_starts_fresh():
    runner = _runner(["a"])
    table = runner.drafter.request_states
    table.set("a", table.policy.observe(table.get("a"), 4, 4, None))
    # "a" aborted and resubmitted under the same id in one step: vLLM keeps
    # the new request in `requests`, but its state must not be the old one
    def resubmit(runner, scheduler_output):
        return "result"
    update_states_and_forget_finished(resubmit, runner,
                                      SimpleNamespace(finished_req_ids={"a"}))
    assert "a" not in table


def test_runner_without_plugin_drafter_untouched():
    runner = SimpleNamespace(drafter=None, requests={})
    assert update_states_and_forget_finished(
        _update_states, runner, SimpleNamespace(finished_req_ids={"x"})) == "result"
