"""gammatune_tools.bench.traces: reading what the plugin's trace writer writes."""

import json

from bench_fixtures import trace_line, write_jsonl

from gammatune_tools.bench import traces
from vllm_gammatune import envs
from vllm_gammatune.telemetry import trace


def test_trace_writer_numbers_steps_per_request(tmp_path, monkeypatch):
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv(envs.TRACE, str(path))
    trace._reset_for_tests()
    try:
        trace.record("a", 4, 2)
        trace.record("b", 4, 4)
        trace.record("a", 3, 1)
        trace.writer().flush()
    finally:
        trace._reset_for_tests()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [
        {"req_id": "a", "step": 1, "num_draft_tokens": 4, "num_accepted_tokens": 2},
        {"req_id": "b", "step": 1, "num_draft_tokens": 4, "num_accepted_tokens": 4},
        {"req_id": "a", "step": 2, "num_draft_tokens": 3, "num_accepted_tokens": 1}]
    steps = traces.load_trace(path)
    assert [s["step"] for s in steps["a"]] == [1, 2]
    assert traces.longest_trace([path])[1] == "a"


def test_trace_keeps_engine_steps_apart_from_requests(tmp_path, monkeypatch):
    from vllm_gammatune.policies import StepDecision

    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv(envs.TRACE, str(path))
    trace._reset_for_tests()
    decision = StepDecision(
        batch_size=2, num_scheduled_tokens=2, has_prefill=False, kind="draft",
        num_draft_tokens=5, max_num_draft_tokens=3,
        num_probes=0, catch_up_tokens=40, catch_up_seconds_per_token=0.002,
        drafting_share=0.5, predicted_tokens=4.5, predicted_seconds=0.2,
        previous_cycle_seconds=0.3, step_costs=(0.1, 0.0, 0.04, 0.0))
    try:
        trace.record("a", 4, 2)
        trace.record_step(decision)
        trace.writer().flush()
    finally:
        trace._reset_for_tests()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[1]["event"] == "plan"
    assert lines[1]["catch_up_tokens"] == 40 and lines[1]["kind"] == "draft"
    assert lines[1]["step_costs"] == [0.1, 0.0, 0.04, 0.0]
    assert list(traces.load_trace(path)) == ["a"]  # the plan line is no request
    assert len(traces.read_traces([path])) == 1


def test_trace_is_off_without_the_variable(monkeypatch):
    monkeypatch.delenv(envs.TRACE, raising=False)
    trace._reset_for_tests()
    trace.record("a", 4, 2)
    assert trace.writer() is None
    trace._reset_for_tests()


def test_labels_accepted_then_first_rejected_then_untested():
    assert traces.token_labels(5, 2) == [1, 1, 0, None, None]
    assert traces.token_labels(3, 3) == [1, 1, 1]
    assert traces.token_labels(4, 0) == [0, None, None, None]
    assert traces.token_labels(0, 0) == []


def test_requests_restart_when_step_does_not_increase(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [
        trace_line("0", 1, 2, 1), trace_line("1", 1, 2, 0), trace_line("0", 2, 2, 2),
        trace_line("0", 1, 2, 1),  # a second run reusing req_id "0"
    ])
    requests = [v.request for v in traces.read_traces([path])]
    assert requests[0] == requests[2] != requests[3]
    assert len(set(requests)) == 3
