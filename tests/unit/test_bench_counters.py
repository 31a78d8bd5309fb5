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
    ngram = ('vllm:gammatune_ngram_draft_tokens_total{engine="0",model_name="m"} 6.0\n'
             'vllm:gammatune_ngram_accepted_tokens_total{engine="0",model_name="m"} 4.0\n')
    assert counters.parse_metrics(ngram) == {"gammatune_ngram_draft_tokens": 6.0,
                                             "gammatune_ngram_accepted_tokens": 4.0}


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


def fake_llm(additional_config):
    """What ``EngineCounts`` reads of an ``LLM``: its stat loggers and config."""
    manager = SimpleNamespace(record=lambda *args, **kwargs: None)
    return SimpleNamespace(llm_engine=SimpleNamespace(
        logger_manager=manager,
        vllm_config=SimpleNamespace(additional_config=additional_config)))


def test_engine_counts_reads_every_plugin_counter(tmp_path):
    from vllm_gammatune.methods import ADDITIONAL_CONFIG_KEY
    from vllm_gammatune.telemetry.metrics import StepCounters

    path = str(tmp_path / "counters")
    file = StepCounters(path, 4, owner=True)
    llm = fake_llm({ADDITIONAL_CONFIG_KEY: {"metrics_path": path,
                                            "settings": {"num_speculative_tokens": 4}}})
    counts = counters.EngineCounts(llm)
    file.record_step([3], 4, 0, 1, num_draft_forward_passes=3)
    file.record_ngram_verification(5, 2)
    llm.llm_engine.logger_manager.record(SimpleNamespace(spec_decoding_stats=SimpleNamespace(
        num_drafts=1, num_draft_tokens=8, num_accepted_tokens=6)))
    values = counts.read()
    file.remove()
    assert values["draft_tokens"] == 8 and values["accepted"] == 6
    assert values["draft_forward_passes"] == 3 and values["plugin_steps"] == 1
    assert values["ngram_draft_tokens"] == 5 and values["ngram_accepted_tokens"] == 2
    without = counters.EngineCounts(fake_llm(None)).read()  # no plugin: zeros
    assert without["ngram_draft_tokens"] == 0 and without["plugin_time_us"] == 0
