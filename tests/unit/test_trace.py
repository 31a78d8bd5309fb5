"""The trace writer holds step counters of live requests only."""

from __future__ import annotations

import json

from vllm_gammatune import envs
from vllm_gammatune.telemetry import trace


def test_forget_missing_drops_finished_requests_and_their_lines_stay(tmp_path):
    path = tmp_path / "trace.jsonl"
    writer = trace.TraceWriter(str(path), background=False)
    writer.record("a", 4, 2)
    writer.record("b", 4, 4)
    assert writer.num_requests == 2
    writer.forget_missing({"b"})
    assert writer.num_requests == 1
    # "a" again is a new request (a resubmitted id): its steps restart at 1
    writer.record("a", 2, 1)
    writer.record("b", 3, 0)
    writer.forget_missing(set())
    assert writer.num_requests == 0
    writer.flush()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["req_id"], r["step"]) for r in rows] == [("a", 1), ("b", 1), ("a", 1), ("b", 2)]


def test_module_forget_missing_is_a_no_op_when_tracing_is_off(monkeypatch):
    monkeypatch.delenv(envs.TRACE, raising=False)
    trace._reset_for_tests()
    trace.forget_missing(set())  # no writer: nothing to do, nothing created
    assert trace.writer() is None
    trace._reset_for_tests()
