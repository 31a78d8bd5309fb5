"""Validation of the plugin's speculative_config (no engine needed)."""

import pytest

from vllm_gammatune.methods.settings import (
    DEFAULT_CONFIDENCE_THRESHOLD,
    GammaTuneConfigError,
    GammaTuneSettings,
    split_speculative_config,
)
from vllm_gammatune.policies import GammaTunePolicy, HFHeuristicPolicy

VLLM_KEYS = frozenset({"model", "num_speculative_tokens", "draft_tensor_parallel_size",
                       "max_model_len", "method", "use_heterogeneous_vocab"})


def split(**config):
    return split_speculative_config(config, VLLM_KEYS)


def test_defaults_and_mapping_to_draft_model():
    settings, draft = split(method="gammatune", model="d", num_speculative_tokens=8,
                            draft_tensor_parallel_size=1)
    assert settings == GammaTuneSettings("gammatune", 8, gamma_init=4, gamma_min=1,
                                         eta=0.5, delta=2, confidence_threshold=None)
    assert draft == {"method": "draft_model", "model": "d", "num_speculative_tokens": 8,
                     "draft_tensor_parallel_size": 1}
    assert isinstance(settings.make_policy(), GammaTunePolicy)


def test_gammatune_plus_default_threshold_and_roundtrip():
    settings, _ = split(method="gammatune_plus", model="d")
    assert settings.num_speculative_tokens == 16
    assert settings.confidence_threshold == DEFAULT_CONFIDENCE_THRESHOLD
    assert GammaTuneSettings.from_dict(settings.to_dict()) == settings
    assistant, _ = split(method="assistant_threshold", model="d")
    assert assistant.confidence_threshold == 0.4  # Hugging Face's default
    assert settings.confidence_threshold != assistant.confidence_threshold
    hf, _ = split(method="hf_heuristic", model="d", gamma_init=2)
    assert isinstance(hf.make_policy(), HFHeuristicPolicy)


def test_user_dict_is_not_modified():
    config = {"method": "gammatune", "model": "d", "gamma_init": 2}
    split_speculative_config(config, VLLM_KEYS)
    assert config == {"method": "gammatune", "model": "d", "gamma_init": 2}


@pytest.mark.parametrize(
    "config,words",
    [
        (dict(gamma_min=5, gamma_init=5, num_speculative_tokens=4), ["gamma_min", "5", "gamma_max"]),
        (dict(gamma_init=9, num_speculative_tokens=8), ["gamma_init", "9", "[gamma_min=1, num_speculative_tokens=8]"]),
        (dict(eta=0.0), ["eta", "0.0", "(0, 1]"]),
        (dict(eta=1.5), ["eta", "1.5", "(0, 1]"]),
        (dict(eta="fast"), ["eta", "fast", "(0, 1]"]),
        (dict(delta=-1), ["delta", "-1", ">= 0"]),
        (dict(num_speculative_tokens=0), ["num_speculative_tokens", "0", ">= 1"]),
        (dict(gamma_init=2.5), ["gamma_init", "2.5", "integer"]),
        (dict(gama_init=3), ["gama_init", "allowed", "gamma_init"]),
        (dict(gamma_max=8), ["gamma_max", "num_speculative_tokens"]),
        (dict(confidence_threshold=0.5), ["confidence_threshold", "gammatune_plus"]),
        (dict(use_heterogeneous_vocab=True), ["use_heterogeneous_vocab", "vocabulary"]),
    ],
)
def test_bad_values_name_field_value_and_allowed(config, words):
    with pytest.raises(GammaTuneConfigError) as info:
        split(method="gammatune", model="d", **config)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("threshold", [0, 1, 1.2, -0.1, float("nan")])
def test_threshold_outside_open_unit_interval(threshold):
    with pytest.raises(GammaTuneConfigError, match=r"confidence_threshold.*\(0, 1\)"):
        split(method="gammatune_plus", model="d", confidence_threshold=threshold)


def test_missing_draft_model_and_unknown_method():
    with pytest.raises(GammaTuneConfigError, match=r"'model'\] is missing"):
        split(method="gammatune")
    with pytest.raises(GammaTuneConfigError, match="allowed: gammatune, gammatune_plus"):
        split(method="gamma_tune", model="d")


@pytest.mark.parametrize("budget", [0, -0.1, 1.5, "all", True])
def test_probe_budget_outside_unit_interval(budget):
    with pytest.raises(GammaTuneConfigError) as info:
        split(method="gammatune_cost", model="d", probe_budget=budget)
    message = str(info.value)
    assert "probe_budget" in message and "(0, 1]" in message and repr(budget) in message


def test_probe_budget_default_and_given():
    settings, _ = split(method="gammatune_cost", model="d")
    assert settings.probe_budget == 0.01
    settings, draft = split(method="gammatune_cost", model="d", probe_budget=0.05)
    assert settings.probe_budget == 0.05 and "probe_budget" not in draft
    assert settings.make_policy().probe_budget == 0.05


@pytest.mark.parametrize("gain", [-0.01, 1.0, "some", None])
def test_min_draft_gain_outside_its_interval(gain):
    with pytest.raises(GammaTuneConfigError) as info:
        split(method="gammatune_cost", model="d", min_draft_gain=gain)
    message = str(info.value)
    assert "min_draft_gain" in message and "[0, 1)" in message


def test_min_draft_gain_default_and_given():
    settings, _ = split(method="gammatune_cost", model="d")
    assert settings.min_draft_gain == 0.05
    settings, draft = split(method="gammatune_cost", model="d", min_draft_gain=0.0)
    assert settings.make_policy().min_draft_gain == 0.0 and "min_draft_gain" not in draft
