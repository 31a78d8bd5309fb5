"""The front end's exporter: every metric of the table, as ``LLM.get_metrics()``
reads it (vLLM's own reader of the Prometheus registry)."""

from __future__ import annotations

import pytest

from vllm_gammatune.telemetry.metrics import METRICS, StepCounters, plugin_counts, plugin_gauges
from vllm_gammatune.telemetry.prometheus import forget_engine_counters, register_engine_counters


def _plugin_metrics() -> dict:
    from vllm.v1.metrics.reader import get_metrics_snapshot

    return {m.name: m for m in get_metrics_snapshot() if m.name.startswith("vllm:gammatune_")}


@pytest.fixture
def counters():
    owner = StepCounters.create(4)
    register_engine_counters(owner, "model-x", "gammatune_cost")
    yield owner
    forget_engine_counters()
    owner.remove()


def test_every_metric_is_reported_with_its_kind_and_value(counters):
    before = _plugin_metrics()
    # a fresh engine: no info (the drafter is not confirmed)
    assert set(before) == {m.name for m in METRICS} - {"vllm:gammatune_info"}
    writer = StepCounters.attach(counters.path, 4)
    writer.record_step([1, 4, 6], num_planned_draft_tokens=12, num_confidence_stops=1,
                       tracked_requests=3, num_draft_forward_passes=4, num_entropy_stops=2,
                       policy_seconds=0.0025, num_catch_up_tokens=5,
                       num_stopped_draft_tokens=3)
    writer.record_step([], num_planned_draft_tokens=0, num_confidence_stops=0,
                       tracked_requests=2, num_skipped_draft_steps=1)
    writer.record_verification(2, [1.5, float("inf")], [0.25, 0.5])
    writer.record_ngram_verification(7, 5)
    writer.mark_drafter_confirmed()
    got = _plugin_metrics()
    assert set(got) == {m.name for m in METRICS}
    kinds = {m.name: m.kind for m in METRICS}
    for name, metric in got.items():
        assert type(metric).__name__.lower() == kinds[name], name
        assert metric.labels["model_name"] == "model-x" and metric.labels["engine"] == "0"
    length = got["vllm:gammatune_draft_length"]
    assert (length.count, length.sum) == (3, 11.0)
    assert length.buckets == {"0.0": 0, "1.0": 1, "2.0": 1, "3.0": 1, "4.0": 3, "+Inf": 3}
    values = {name: metric.value for name, metric in got.items() if name != length.name}
    assert values == {
        "vllm:gammatune_planned_draft_tokens": 12,
        "vllm:gammatune_confidence_stops": 1,
        "vllm:gammatune_draft_forward_passes": 4,
        "vllm:gammatune_tracked_requests": 2,
        "vllm:gammatune_adasd_entropy_stops": 2,
        "vllm:gammatune_adasd_relaxed_acceptances": 2,
        "vllm:gammatune_adasd_mean_generation_threshold": 0.75,  # 1.5 over 2 samples
        "vllm:gammatune_adasd_mean_verification_threshold": 0.375,
        "vllm:gammatune_plugin_time_us": 2500,
        "vllm:gammatune_skipped_draft_steps": 1,
        "vllm:gammatune_catch_up_tokens": 5,
        "vllm:gammatune_steps": 2,
        "vllm:gammatune_stopped_draft_tokens": 3,
        "vllm:gammatune_ngram_draft_tokens": 7,
        "vllm:gammatune_ngram_accepted_tokens": 5,
        "vllm:gammatune_info": 1,
    }
    assert {k: got["vllm:gammatune_info"].labels[k] for k in ("method", "runner", "drafter")} \
        == {"method": "gammatune_cost", "runner": "v1", "drafter": "AdaptiveDraftModelProposer"}
    # the readers: what get_metrics() shows is what the file holds
    assert plugin_counts(got.values()) == counters.counts()
    assert plugin_gauges(got.values())["tracked_requests"] == 2
    writer.remove()


def test_forgotten_engines_are_not_reported(counters):
    assert _plugin_metrics()
    forget_engine_counters()
    assert _plugin_metrics() == {}
