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
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.5
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 18.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 20.0
"""


def test_parse_metrics_sums_labels_and_derives_exact_counts():
    values = counters.parse_metrics(METRICS_PAGE)
    assert values == {"drafts": 15.0, "draft_tokens": 40.0, "accepted": 30.0,
                      "gammatune_plugin_time_us": 1200.0, "gammatune_steps": 12.0,
                      "target_passes": 20.0, "engine_steps": 20.0}
    before = {"drafts": 5.0, "draft_tokens": 10.0, "accepted": 10.0,
              "gammatune_plugin_time_us": 200.0, "target_passes": 4.0, "engine_steps": 4.0}
    delta = counters.metrics_delta(before, values)
    # vLLM counts 20 accepted; 40 tokens in 16 passes: 24 accepted within max_tokens,
    # over 10 verifications with drafts
    derived = counters.derived(delta, output_tokens=40)
    assert derived["target_passes_per_token"] == pytest.approx(16 / 40)
    assert derived["mean_accepted_length"] == pytest.approx(1 + 24 / 10)
    assert derived["acceptance_rate"] == pytest.approx(20 / 30)  # vLLM's, of verified tokens
    assert derived["draft_forwards_per_token"] is None  # vLLM's drafter, K unknown
    assert counters.derived(delta, 40, "vllm_draft_model", 3)["draft_forwards_per_token"] \
        == pytest.approx(3 * 16 / 40)  # K forwards in each of the 16 steps
    assert counters.derived(delta, 40, "vllm_ngram", 3)["draft_forwards_per_token"] == 0.0
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
               SimpleNamespace(name="vllm:iteration_tokens_total", value=None, count=9)]
    llm = SimpleNamespace(get_metrics=lambda: metrics)
    values = counters.read_counters(llm)
    assert values["drafts"] == 7.0 and values["plugin_steps"] == 3.0
    assert values["engine_steps"] == 9.0 and values["accepted"] == 0.0
    assert values["target_passes"] == 0.0  # no token emitted yet
    metrics += [SimpleNamespace(name="vllm:time_to_first_token_seconds", value=None, count=2),
                SimpleNamespace(name="vllm:inter_token_latency_seconds", value=None, count=7)]
    assert counters.read_counters(llm)["target_passes"] == 9.0


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
    llm.llm_engine.logger_manager.record(
        scheduler_stats=SimpleNamespace(spec_decoding_stats=SimpleNamespace(
            num_drafts=1, num_draft_tokens=8, num_accepted_tokens=6)),
        iteration_stats=SimpleNamespace(time_to_first_tokens_iter=[0.1],
                                        inter_token_latencies_iter=[0.2, 0.2]),
        mm_cache_stats=None)
    # a step that emitted nothing (vLLM records its scheduler stats alone)
    llm.llm_engine.logger_manager.record(scheduler_stats=SimpleNamespace(),
                                         iteration_stats=None)
    values = counts.read()
    file.remove()
    assert values["draft_tokens"] == 8 and values["accepted"] == 6
    assert values["engine_steps"] == 1 and values["target_passes"] == 3
    assert values["draft_forward_passes"] == 3 and values["plugin_steps"] == 1
    assert values["ngram_draft_tokens"] == 5 and values["ngram_accepted_tokens"] == 2
    without = counters.EngineCounts(fake_llm(None)).read()  # no plugin: zeros
    assert without["ngram_draft_tokens"] == 0 and without["plugin_time_us"] == 0


def test_exact_counts_leave_out_what_vllm_accepted_past_max_tokens():
    """A request cut by max_tokens while drafting long: at K=6 its last step's
    draft is accepted whole (vLLM counts 6) but only 2 more tokens are
    generated. 3 passes made 10 tokens: the exact counts say so."""
    # passes: prefill (1 token), a verification accepting 6 (7 tokens), the
    # last accepting 6 of which 1 fits beside the bonus (2 tokens)
    exact = counters.exact_counts(output_tokens=10, target_passes=3, drafts=2, forwards=18)
    assert exact["target_passes_per_token"] == pytest.approx(0.3)
    assert exact["accepted_length"] == pytest.approx(1 + 7 / 2)  # vLLM's: 1 + 12 / 2
    assert exact["draft_forwards_per_token"] == pytest.approx(1.8)
    assert counters.draft_forwards("vllm_draft_model", 6, 0.0, 3) == 18
    assert counters.draft_forwards("gammatune_cost", 8, 7.0, 3) == 7.0  # the plugin's counter
    assert counters.draft_forwards("no_spec", 0, 0.0, 3) == 0.0
    assert counters.draft_forwards("vllm_draft_model", 6, 0.0, None) is None
    missing = counters.exact_counts(output_tokens=10, target_passes=0, drafts=2, forwards=None)
    assert missing == {"target_passes_per_token": None, "draft_forwards_per_token": None,
                       "accepted_length": None}
