"""Bad speculative configs fail at LLM(...) with an error naming the field."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from llm_helpers import make_llm, running_llm


def spec(tiny, **overrides):
    return {"method": "gammatune", "model": tiny["draft"], "num_speculative_tokens": 8,
            **overrides}


@pytest.mark.parametrize(
    "overrides,words",
    [
        ({"gamma_tune": 1}, ["gamma_tune", "allowed"]),
        ({"gamma_min": 9, "gamma_init": 9}, ["gamma_min", "9", "gamma_max", "8"]),
        ({"eta": 0}, ["eta", "0", "(0, 1]"]),
        ({"eta": 1.01}, ["eta", "1.01", "(0, 1]"]),
        ({"method": "gammatune_plus", "confidence_threshold": 1.0},
         ["confidence_threshold", "1.0", "(0, 1)"]),
        ({"method": "assistant_threshold", "confidence_threshold": 0},
         ["confidence_threshold", "(0, 1)"]),
        ({"model": None}, ["'model'", "missing"]),
        ({"method": "gammatune_pls"}, ["gammatune_pls", "allowed", "gammatune_plus"]),
        ({"method": "adasd", "adasd_mode": "gen"}, ["adasd_mode", "'gen'", "'generation'"]),
        ({"method": "adasd", "adasd_window": 9}, ["adasd_window", "9", "[1, num_speculative_tokens=8]"]),
        ({"method": "adasd", "adasd_window": 0}, ["adasd_window", "0"]),
        ({"method": "adasd", "eta": 0.5}, ["eta", "not a parameter of method 'adasd'"]),
        ({"method": "adasd", "rejection_sample_method": "synthetic"},
         ["rejection_sample_method", "'synthetic'", "'adasd'", "allowed: 'standard'"]),
        ({"method": "gammatune_cost", "probe_interval": 0}, ["probe_interval", "0", ">= 1"]),
        ({"method": "gammatune_cost", "fixed_step_costs": {"target_step_s": 1}},
         ["fixed_step_costs", "target_token_s", "draft_pass_s"]),
        ({"method": "gammatune_cost", "fixed_step_costs": {
            "target_step_s": 1, "target_token_s": 0, "draft_pass_s": -1,
            "draft_token_s": 0}}, ["fixed_step_costs.draft_pass_s", "-1"]),
        ({"method": "gammatune_cost", "gamma_init": 3},
         ["gamma_init", "not a parameter of method 'gammatune_cost'"]),
        ({"drafter": "eagle"}, ["drafter", "'eagle'", "'draft_model', 'ngram'"]),
        ({"drafter": "ngram"}, ["'model'", "drafter 'ngram'", "runs no draft model"]),
        ({"drafter": "ngram", "model": None, "prompt_lookup_min": 4,
          "prompt_lookup_max": 2}, ["prompt_lookup_min", "4", "prompt_lookup_max=2"]),
        ({"drafter": "ngram", "model": None, "prompt_lookup_max": 0},
         ["prompt_lookup_max", "0", ">= 1"]),
        ({"prompt_lookup_min": 2}, ["prompt_lookup_min", "drafter 'draft_model'",
                                    "read by drafter 'ngram'"]),
        ({"method": "gammatune_plus", "drafter": "ngram", "model": None},
         ["drafter", "'ngram'", "'gammatune_plus'", "allowed: 'draft_model'"]),
        ({"method": "gammatune_cost", "drafter": "ngram", "model": None,
          "token_stop": True}, ["token_stop", "drafter 'ngram'"]),
    ],
)
def test_bad_config_raises_at_llm(tiny, overrides, words):
    from vllm_gammatune.methods import GammaTuneConfigError

    config = spec(tiny, **overrides)
    if "method" in overrides and overrides["method"] == "gammatune_pls":
        # vLLM's own validation rejects unknown methods; the message still names it
        with pytest.raises(ValueError) as info:
            make_llm(tiny["target"], config)
        assert "gammatune_pls" in str(info.value)
        return
    with pytest.raises(GammaTuneConfigError) as info:
        make_llm(tiny["target"], config)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("method", ["gammatune", "adasd"])
def test_draft_with_other_vocabulary(tiny, method):
    from vllm_gammatune.methods import GammaTuneConfigError

    with pytest.raises(GammaTuneConfigError) as info:
        make_llm(tiny["target"], spec(tiny, method=method, model=tiny["draft_other_vocab"]))
    message = str(info.value)
    assert tiny["draft_other_vocab"] in message and "vocabulary" in message


def test_async_scheduling_refused(tiny):
    from vllm_gammatune.methods import GammaTuneConfigError

    with pytest.raises(GammaTuneConfigError, match="async_scheduling=True"):
        make_llm(tiny["target"], spec(tiny), async_scheduling=True)


@pytest.fixture
def counters_created(monkeypatch) -> list:
    """Every counter file the plugin creates for an engine (none when a config is
    refused before anything is built)."""
    from vllm_gammatune.telemetry.metrics import StepCounters

    created = []
    original = StepCounters.create.__func__

    def create(cls, *args, **kwargs):
        created.append(args)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(StepCounters, "create", classmethod(create))
    return created


def test_pipeline_parallelism_refused_before_anything_is_built(tiny, counters_created):
    from vllm_gammatune.methods import GammaTuneConfigError

    with pytest.raises(GammaTuneConfigError) as info:
        make_llm(tiny["target"], spec(tiny), pipeline_parallel_size=2)
    assert "pipeline_parallel_size=2" in str(info.value)
    assert "last pipeline rank only" in str(info.value)
    assert counters_created == []


def _engine_config(tiny, speculative_config: dict, **engine_kwargs):
    """The front end's config step (``vllm serve`` makes the same call; ``LLM``
    refuses data parallelism itself)."""
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(model=tiny["target"], speculative_config=speculative_config,
                      max_model_len=512, dtype="float32", **engine_kwargs).create_engine_config()


def test_data_parallelism_of_an_moe_target_refused_before_anything_is_built(
        tiny, monkeypatch, counters_created):
    """The tiny target is dense; vLLM's own test of whether a model is a mixture
    of experts (``ModelConfig.is_moe``) is made to say yes."""
    from vllm.config.model import ModelConfig

    from vllm_gammatune.methods import GammaTuneConfigError

    monkeypatch.setattr(ModelConfig, "is_moe", property(lambda self: True))
    with pytest.raises(GammaTuneConfigError) as info:
        _engine_config(tiny, spec(tiny, method="gammatune_cost"), data_parallel_size=2)
    message = str(info.value)
    assert "data_parallel_size=2 with a mixture-of-experts target" in message
    assert "coordinate_batch_across_dp" in message and "'gammatune_cost'" in message
    assert counters_created == []


def test_data_parallelism_of_a_dense_target_is_configured(tiny, counters_created):
    """Its ranks are independent engines; only the config is built here."""
    config = _engine_config(tiny, spec(tiny), data_parallel_size=2)
    assert config.parallel_config.data_parallel_size == 2
    assert config.speculative_config.method == "draft_model"
    assert len(counters_created) == 1


def test_unsupported_vllm_version(tiny, monkeypatch):
    from vllm_gammatune.compat import pin

    monkeypatch.setattr(pin, "installed_vllm_version", lambda: "0.31.2")
    with pytest.raises(pin.UnsupportedVllmVersionError) as info:
        make_llm(tiny["target"], spec(tiny))
    assert "0.31.2" in str(info.value) and "0.32" in str(info.value)


def test_unsupported_vllm_version_at_plugin_load(tiny):
    """On another vLLM the plugin patches nothing but refuses its methods."""
    code = textwrap.dedent(f"""
        import vllm
        vllm.__version__ = "0.31.0"
        from vllm.engine.arg_utils import EngineArgs
        from vllm_gammatune.compat.pin import UnsupportedVllmVersionError
        args = EngineArgs(model={tiny['target']!r}, speculative_config={{
            "method": "gammatune", "model": {tiny['draft']!r}}})
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
        assert not hasattr(GPUModelRunner.__init__, "__vllm_gammatune_patch__")
        try:
            args.create_engine_config()
        except UnsupportedVllmVersionError as exc:
            assert "0.31.0" in str(exc) and "0.32.x and 0.33.x" in str(exc), exc
            print("REFUSED")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True,
                            text=True, timeout=300)
    assert "REFUSED" in result.stdout, result.stderr[-3000:]


def test_engine_works_after_bad_inputs(tiny):
    from vllm import SamplingParams

    with pytest.raises(ValueError):
        make_llm(tiny["target"], spec(tiny, eta=7))
    with running_llm(tiny["target"], spec(tiny)) as llm:
        out = llm.generate(["def add(a, b):"], SamplingParams(temperature=0, max_tokens=8))
    assert len(out[0].outputs[0].token_ids) == 8
