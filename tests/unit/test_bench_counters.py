"""gammatune_tools.bench.counters: reading an engine's and a server's counters."""

from types import SimpleNamespace

import pytest

from gammatune_tools.bench import counters

METRICS_PAGE = """# HELP vllm:spec_decode_num_drafts_total drafts
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 9.0
vllm:gammatune_plugin_time_us_total{engine="0",model_name="m"} 1200.0
vllm:gammatune_steps_total{engine="0",model_name="m"} 12.0
vllm:gammatune_draft_length_bucket{le="1.0"} 3.0
"""


def test_parse_metrics_sums_labels_and_derives_counts():
    values = counters.parse_metrics(METRICS_PAGE)
    assert values == {"drafts": 15.0, "draft_tokens": 40.0, "accepted": 30.0,
                      "gammatune_plugin_time_us": 1200.0, "gammatune_steps": 12.0}
    before = {"drafts": 5.0, "draft_tokens": 10.0, "accepted": 10.0,
              "gammatune_plugin_time_us": 200.0}
    delta = counters.metrics_delta(before, values)
    derived = counters.derived(delta, output_tokens=40)
    assert derived["mean_accepted_length"] == pytest.approx(3.0)  # 1 + 20 / 10
    assert derived["acceptance_rate"] == pytest.approx(20 / 30)
    assert derived["target_passes_per_token"] == pytest.approx(0.5)
    assert derived["plugin_time_us_per_token"] == pytest.approx(25.0)
    assert derived["plugin_us_per_step"] == pytest.approx(1000 / 12)  # 12 steps, none before
    assert counters.derived({}, 0)["mean_accepted_length"] is None


def test_read_counters_takes_what_the_engine_exports_and_zero_for_the_rest():
    metrics = [SimpleNamespace(name="vllm:spec_decode_num_drafts", value=7),
               SimpleNamespace(name="vllm:gammatune_steps", value=3),
               SimpleNamespace(name="vllm:iteration_tokens_total", value=None, count=9),
               SimpleNamespace(name=counters.DRAFTING_SCALE, value=0.5)]
    llm = SimpleNamespace(get_metrics=lambda: metrics)
    values = counters.read_counters(llm)
    assert values["drafts"] == 7.0 and values["plugin_steps"] == 3.0
    assert values["engine_steps"] == 9.0 and values["accepted"] == 0.0
    assert counters.read_gauge(llm, counters.DRAFTING_SCALE) == 0.5
    assert counters.read_gauge(llm, "vllm:nothing") is None
