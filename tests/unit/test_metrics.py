"""The counter file: one table of metrics, and several writers lose no update."""

from __future__ import annotations

import multiprocessing
import os
import types

import pytest

from vllm_gammatune.telemetry.metrics import (
    FIELDS,
    METRICS,
    StepCounters,
    plugin_counts,
    plugin_gauges,
)


@pytest.fixture
def owner():
    counters = StepCounters.create(4)
    yield counters
    counters.remove()


def test_counters_shared_between_writer_and_reader(owner):
    writer = StepCounters.attach(owner.path, 4)
    writer.record_step([1, 4, 4, 7], num_planned_draft_tokens=20,
                       num_confidence_stops=2, tracked_requests=3,
                       num_draft_forward_passes=7, policy_seconds=0.5)
    writer.record_step([2], num_planned_draft_tokens=2, num_confidence_stops=0,
                       tracked_requests=1, num_catch_up_tokens=9, policy_seconds=0.75)
    writer.record_step([], num_planned_draft_tokens=0, num_confidence_stops=0,
                       tracked_requests=1, num_skipped_draft_steps=1)
    snap = owner.snapshot()
    assert snap["num_draft_tokens"] == 1 + 4 + 4 + 7 + 2
    assert snap["num_planned_draft_tokens"] == 22
    assert snap["num_confidence_stops"] == 2
    assert snap["tracked_requests"] == 1  # this writer's latest
    assert snap["plugin_micros"] == 750_000  # the writer's total so far
    assert snap["num_draft_forward_passes"] == 7
    assert snap["num_skipped_draft_steps"] == 1
    assert snap["num_catch_up_tokens"] == 9
    assert snap["num_steps"] == 3
    # lengths above the cap land in the cap's bucket
    assert snap["draft_length_counts"] == [0, 1, 1, 0, 3]
    writer.remove()
    path = owner.path
    owner.remove()
    assert not os.path.exists(path)


def test_attach_refuses_a_file_of_another_layout(owner):
    with pytest.raises(ValueError, match="expects"):
        StepCounters.attach(owner.path, 8)


def test_the_file_layout_and_the_counts_come_from_the_table(owner):
    assert len(set(FIELDS)) == len(FIELDS)
    assert {m.field for m in METRICS} <= set(FIELDS)
    assert len({m.name for m in METRICS}) == len({m.count for m in METRICS}) == len(METRICS)
    writer = StepCounters.attach(owner.path, 4)
    writer.record_step([3], num_planned_draft_tokens=4, num_confidence_stops=1,
                       tracked_requests=1, num_entropy_stops=2, policy_seconds=0.001)
    writer.record_verification(5, [1.5, float("inf")], [0.25, 0.75])
    writer.record_ngram_verification(6, 4)
    counts = owner.counts()
    assert counts == {
        "planned_draft_tokens": 4.0, "confidence_stops": 1.0, "draft_forward_passes": 0.0,
        "entropy_stops": 2.0, "relaxed_acceptances": 5.0, "plugin_time_us": 1000.0,
        "skipped_draft_steps": 0.0, "catch_up_tokens": 0.0, "plugin_steps": 1.0,
        "stopped_draft_tokens": 0.0, "ngram_draft_tokens": 6.0, "ngram_accepted_tokens": 4.0}
    writer.remove()


def test_plugin_counts_and_gauges_read_get_metrics_values():
    metric = types.SimpleNamespace
    got = [metric(name="vllm:gammatune_steps", value=12),
           metric(name="vllm:gammatune_plugin_time_us", value=340),
           metric(name="vllm:gammatune_tracked_requests", value=5),
           metric(name="vllm:spec_decode_num_drafts", value=3)]
    counts = plugin_counts(got)
    assert counts["plugin_steps"] == 12.0 and counts["plugin_time_us"] == 340.0
    assert counts["skipped_draft_steps"] == 0.0  # not exported: nothing counted
    assert set(counts) == {m.count for m in METRICS if m.kind == "counter"}
    gauges = plugin_gauges(got)
    assert gauges["tracked_requests"] == 5.0
    assert gauges["mean_generation_threshold"] is None  # not exported


# -- several engines (data-parallel ranks) write one file ---------------------
STEPS = 3000
LENGTHS = {0: [1, 2], 1: [4, 3, 0]}


def _write_steps(path: str, writer: int, start) -> None:
    counters = StepCounters.attach(path, 4)
    start.wait()
    for step in range(STEPS):
        counters.record_step(LENGTHS[writer], num_planned_draft_tokens=5,
                             num_confidence_stops=1, tracked_requests=writer + 2,
                             num_draft_forward_passes=3, policy_seconds=(step + 1) / 1e6)
        counters.record_verification(1, [0.5], [0.25])
    counters.set_tracked_requests(writer + 10)
    counters.remove()


def test_two_processes_writing_at_once_lose_no_update(owner):
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(2)
    writers = [context.Process(target=_write_steps, args=(owner.path, w, start))
               for w in LENGTHS]
    for process in writers:
        process.start()
    for process in writers:
        process.join(timeout=120)
        assert process.exitcode == 0
    snap = owner.snapshot()
    assert snap["num_steps"] == 2 * STEPS
    assert snap["num_draft_tokens"] == STEPS * (3 + 7)
    assert snap["num_planned_draft_tokens"] == 2 * STEPS * 5
    assert snap["num_confidence_stops"] == snap["num_relaxed_acceptances"] == 2 * STEPS
    assert snap["num_draft_forward_passes"] == 2 * STEPS * 3
    assert snap["draft_length_counts"] == [STEPS, STEPS, STEPS, STEPS, STEPS]
    assert snap["num_threshold_samples"] == 2 * STEPS
    assert snap["generation_threshold_micro_sum"] == 2 * STEPS * 500_000
    # each writer's own totals add up: its last tracked count, its time
    assert snap["tracked_requests"] == 10 + 11
    assert snap["plugin_micros"] == 2 * STEPS
