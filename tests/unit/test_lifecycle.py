"""integration.lifecycle: finished requests' records go when the worker hears of them."""

from types import SimpleNamespace

from vllm_gammatune.drafter.contract import PluginDrafter
from vllm_gammatune.drafter.proposer import AdaptiveDraftModelProposer
from vllm_gammatune.drafter.request_records import RequestRecords
from vllm_gammatune.integration.lifecycle import update_states_and_forget_finished
from vllm_gammatune.policies import GammaTunePolicy, Verification


class _Counters:
    tracked = None

    def set_tracked_requests(self, n):
        self.tracked = n


class _Drafter(PluginDrafter):
    """Stands in for the plugin's drafter, with its own ``forget_finished``."""

    def __init__(self, records, holes):
        self.records, self.holes, self._counters = records, holes, _Counters()

    @property
    def counters(self):
        return self._counters

    forget_finished = AdaptiveDraftModelProposer.forget_finished


def _runner(req_ids):
    holes = SimpleNamespace(live=None)
    records = RequestRecords(GammaTunePolicy(16, 4, 1, 0.5, 2),
                             also_forget=(lambda live: setattr(holes, "live", set(live)),))
    for req_id in req_ids:
        records.keep_draft(req_id, object())
        records.keep_traced_token_probs(req_id, [0.5])
    return SimpleNamespace(drafter=_Drafter(records, holes),
                           requests={r: object() for r in req_ids})


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
    records = runner.drafter.records
    assert sorted(records) == ["a", "c"] and records.num_kept_drafts == 2
    assert runner.drafter.holes.live == {"a", "c"}
    assert runner.drafter.counters.tracked == 2


def test_idle_step_empties_the_table():
    runner = _runner(["a", "b"])
    update_states_and_forget_finished(
        _update_states, runner, SimpleNamespace(finished_req_ids={"a", "b"}))
    assert len(runner.drafter.records) == 0
    assert runner.drafter.counters.tracked == 0


def test_finished_id_resubmitted_starts_fresh():
    runner = _runner(["a"])
    records = runner.drafter.records
    records.set_policy_state("a", records.policy.observe(records.policy_state("a"),
                                                         Verification("a", 0, 4, 4)))
    # "a" aborted and resubmitted under the same id in one step: vLLM keeps
    # the new request in `requests`, but its state must not be the old one
    def resubmit(runner, scheduler_output):
        return "result"
    update_states_and_forget_finished(resubmit, runner,
                                      SimpleNamespace(finished_req_ids={"a"}))
    assert "a" not in records


def test_runner_without_plugin_drafter_untouched():
    runner = SimpleNamespace(drafter=None, requests={})
    assert update_states_and_forget_finished(
        _update_states, runner, SimpleNamespace(finished_req_ids={"x"})) == "result"
