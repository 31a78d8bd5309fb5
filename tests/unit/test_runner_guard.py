"""The worker's start-up check that it built the plugin's drafter, and the
config-time refusal of Model Runner V2 (vLLM's V2 runner cannot be built on
this CPU, so its outcome is simulated: a runner whose drafter is not the
plugin's)."""

from __future__ import annotations

import types

import pytest

from vllm_gammatune.methods import ADDITIONAL_CONFIG_KEY, GammaTuneConfigError
from vllm_gammatune.integration.runner_choice import (
    DrafterNotActiveError,
    confirm_plugin_drafter,
    load_model_confirming_drafter,
    plugin_method_of,
    refuse_unsupported_parallelism,
    v2_unsupported_features,
    validate_v2_refusing_plugin_methods,
)


def _config(method: str | None, data_parallel_size: int = 1):
    additional = {} if method is None else {
        ADDITIONAL_CONFIG_KEY: {"settings": {"method": method}}}
    return types.SimpleNamespace(
        additional_config=additional,
        parallel_config=types.SimpleNamespace(data_parallel_size=data_parallel_size))


def _layout(pipeline: int = 1, data: int = 1, moe: bool = False):
    """(target model config, target parallel config) as the front end sees them."""
    return (types.SimpleNamespace(is_moe=moe),
            types.SimpleNamespace(pipeline_parallel_size=pipeline, data_parallel_size=data))


class StandaloneARSpeculator:
    """Stands for Model Runner V2's draft-model speculator."""


class RunnerV2:
    def __init__(self):
        self.speculator = StandaloneARSpeculator()


def test_plugin_method_read_from_the_engines_own_config():
    assert plugin_method_of(_config("gammatune")) == "gammatune"
    assert plugin_method_of(_config(None)) is None
    assert plugin_method_of(types.SimpleNamespace()) is None


def test_v2_unsupported_features_name_the_plugin_method_only_for_its_engine():
    def original(config):
        return ["pipeline parallelism with external_launcher"]

    assert v2_unsupported_features(original, _config("adasd")) == [
        "pipeline parallelism with external_launcher", "speculative method 'adasd' (vllm-gammatune)"]
    assert v2_unsupported_features(original, _config(None)) == [
        "pipeline parallelism with external_launcher"]


def test_v2_forced_by_a_feature_is_refused(monkeypatch):
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)

    def original(config):
        raise AssertionError("vLLM's validation must not run for a plugin method")

    with pytest.raises(GammaTuneConfigError, match="requires vLLM's Model Runner V2") as info:
        validate_v2_refusing_plugin_methods(original, _config("gammatune"))
    assert "'gammatune'" in str(info.value)


def test_v2_validation_is_vllms_own_without_plugin_method():
    calls = []
    validate_v2_refusing_plugin_methods(calls.append, _config(None))
    assert len(calls) == 1


@pytest.mark.parametrize("runner", [RunnerV2(), types.SimpleNamespace(drafter=None)])
def test_worker_without_plugin_drafter_fails_at_start(runner):
    with pytest.raises(DrafterNotActiveError) as info:
        confirm_plugin_drafter(runner, _config("gammatune_cost"))
    message = str(info.value)
    assert "'gammatune_cost'" in message and type(runner).__qualname__ in message
    assert "no drafter" in message and "vllm-gammatune doctor" in message


def test_worker_with_vllms_fixed_k_drafter_fails_at_start():
    from vllm.v1.spec_decode.draft_model import DraftModelProposer

    runner = types.SimpleNamespace(drafter=object.__new__(DraftModelProposer))
    with pytest.raises(DrafterNotActiveError, match="drafter vllm.v1.spec_decode."
                       "draft_model.DraftModelProposer, not the plugin's"):
        confirm_plugin_drafter(runner, _config("gammatune"))


def test_worker_with_plugin_drafter_is_confirmed_and_marked():
    from vllm_gammatune.drafter.proposer import AdaptiveDraftModelProposer

    marked = []

    class RankZeroDrafter(AdaptiveDraftModelProposer):
        """The plugin's drafter class (no engine needed) with its metrics file."""

        counters = types.SimpleNamespace(mark_drafter_confirmed=lambda: marked.append(1))

    drafter = object.__new__(RankZeroDrafter)
    drafter.settings = types.SimpleNamespace(num_speculative_tokens=8)
    runner = types.SimpleNamespace(drafter=drafter)
    assert confirm_plugin_drafter(runner, _config("gammatune")) == "gammatune"
    assert marked == [1]


def test_load_model_checks_before_the_weights_load():
    loaded = []
    worker = types.SimpleNamespace(model_runner=RunnerV2(), vllm_config=_config("gammatune"))
    with pytest.raises(DrafterNotActiveError):
        load_model_confirming_drafter(lambda w, **kw: loaded.append(w), worker)
    assert loaded == []
    plain = types.SimpleNamespace(model_runner=RunnerV2(), vllm_config=_config(None))
    load_model_confirming_drafter(lambda w, **kw: loaded.append(w), plain)
    assert loaded == [plain]


def test_pipeline_parallelism_is_refused_saying_why():
    with pytest.raises(GammaTuneConfigError) as info:
        refuse_unsupported_parallelism("gammatune", *_layout(pipeline=2))
    message = str(info.value)
    for words in ("pipeline_parallel_size=2", "'gammatune'", "last pipeline rank only",
                  "every worker drafts", "allowed: pipeline_parallel_size=1"):
        assert words in message, (words, message)


def test_data_parallelism_of_an_moe_target_is_refused_saying_why():
    with pytest.raises(GammaTuneConfigError) as info:
        refuse_unsupported_parallelism("gammatune_cost", *_layout(data=4, moe=True))
    message = str(info.value)
    for words in ("data_parallel_size=4", "mixture-of-experts", "'gammatune_cost'",
                  "coordinate_batch_across_dp", "every draft pass",
                  "allowed: data_parallel_size=1", "'draft_model'"):
        assert words in message, (words, message)


@pytest.mark.parametrize("layout", [_layout(), _layout(data=4), _layout(moe=True)])
def test_dense_data_parallelism_and_a_single_moe_rank_are_allowed(layout):
    refuse_unsupported_parallelism("gammatune", *layout)


def test_a_worker_of_a_lockstep_data_parallel_engine_fails_before_the_weights_load():
    """Each worker checks the condition under which vLLM's drafter synchronises
    the ranks, on the config its engine kept (a dense target's ranks have 1)."""
    loaded = []
    worker = types.SimpleNamespace(model_runner=RunnerV2(),
                                   vllm_config=_config("adasd", data_parallel_size=2))
    with pytest.raises(GammaTuneConfigError, match="data_parallel_size=2 ranks in lockstep"):
        load_model_confirming_drafter(lambda w, **kw: loaded.append(w), worker)
    plain = types.SimpleNamespace(model_runner=RunnerV2(),
                                  vllm_config=_config(None, data_parallel_size=2))
    load_model_confirming_drafter(lambda w, **kw: loaded.append(w), plain)
    assert loaded == [plain]
