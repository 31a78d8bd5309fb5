"""One engine's settings: made from the user's speculative_config (validated,
split from vLLM's draft_model keys) and carried to the workers as a dict."""

import pytest

from vllm_gammatune.methods import (
    ADDITIONAL_CONFIG_KEY,
    METHODS,
    GammaTuneConfigError,
    MethodSettings,
    settings_from_additional_config,
    split_speculative_config,
)
from vllm_gammatune.methods.parameters import DEFAULT_CONFIDENCE_THRESHOLD
from vllm_gammatune.policies import CostAwarePolicy, GammaTunePolicy, HFHeuristicPolicy

VLLM_KEYS = frozenset({"model", "num_speculative_tokens", "draft_tensor_parallel_size",
                       "max_model_len", "method", "use_heterogeneous_vocab",
                       "prompt_lookup_min", "prompt_lookup_max"})


def split(**config):
    return split_speculative_config(config, VLLM_KEYS)


def test_defaults_and_mapping_to_draft_model():
    settings, draft = split(method="gammatune", model="d", num_speculative_tokens=8,
                            draft_tensor_parallel_size=1)
    assert settings == MethodSettings("gammatune", 8, {"gamma_init": 4, "gamma_min": 1,
                                                       "eta": 0.5, "delta": 2})
    assert draft == {"method": "draft_model", "model": "d", "num_speculative_tokens": 8,
                     "draft_tensor_parallel_size": 1}
    assert isinstance(settings.make_policy(), GammaTunePolicy)


def test_gammatune_plus_default_threshold_and_roundtrip():
    settings, _ = split(method="gammatune_plus", model="d")
    assert settings.num_speculative_tokens == 16
    assert settings.parameters["confidence_threshold"] == DEFAULT_CONFIDENCE_THRESHOLD
    assert MethodSettings.from_dict(settings.to_dict()) == settings
    assistant, _ = split(method="assistant_threshold", model="d")
    assert assistant.parameters["confidence_threshold"] == 0.4  # Hugging Face's default
    hf, _ = split(method="hf_heuristic", model="d", gamma_init=2)
    assert isinstance(hf.make_policy(), HFHeuristicPolicy)


@pytest.mark.parametrize("name", list(METHODS))
def test_settings_hold_their_methods_parameters_only(name):
    settings, _ = split(method=name, model="d")
    assert set(settings.parameters) == set(METHODS[name].parameters)
    data = settings.to_dict()
    assert set(data) == {"method", "num_speculative_tokens", "drafter",
                         *METHODS[name].parameters}
    assert data["method"] == name and MethodSettings.from_dict(data) == settings


def test_settings_are_read_only_and_refuse_another_methods_parameters():
    settings, _ = split(method="gammatune", model="d")
    with pytest.raises(TypeError):
        settings.parameters["eta"] = 0.9
    with pytest.raises(ValueError, match="takes"):
        MethodSettings("adasd", 20, {"eta": 0.5})


def test_to_dict_is_a_copy():
    costs = {"target_step_s": 0.02, "target_token_s": 0.0, "draft_pass_s": 0.005,
             "draft_token_s": 0.0}
    settings, _ = split(method="gammatune_cost", model="d", fixed_step_costs=costs)
    settings.to_dict()["fixed_step_costs"]["target_step_s"] = 9.0
    assert settings.parameters["fixed_step_costs"]["target_step_s"] == 0.02
    assert isinstance(settings.make_policy(), CostAwarePolicy)


def test_an_unknown_method_in_the_workers_settings_fails_at_the_policy():
    settings = MethodSettings.from_dict({"method": "gamma_tune", "num_speculative_tokens": 4})
    with pytest.raises(GammaTuneConfigError, match="allowed: gammatune, gammatune_plus"):
        settings.make_policy()


def test_the_worker_reads_the_settings_from_additional_config():
    settings, _ = split(method="adasd", model="d", adasd_mode="generation")
    carried = {"other": 1, ADDITIONAL_CONFIG_KEY: {"settings": settings.to_dict()}}
    assert settings_from_additional_config(carried) == settings
    assert settings_from_additional_config({"other": 1}) is None
    assert settings_from_additional_config(None) is None


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


def test_a_baselines_initial_length_is_bounded_by_the_default_gamma_min():
    """fixed_draft takes no gamma_min; its gamma_init is checked against the
    default one, with the same words as for GammaTune."""
    with pytest.raises(GammaTuneConfigError) as info:
        split(method="fixed_draft", model="d", gamma_init=9, num_speculative_tokens=4)
    assert str(info.value) == (
        "speculative_config['gamma_init']=9 is not allowed: must be an integer "
        "in [gamma_min=1, num_speculative_tokens=4]")


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
    assert settings.parameters["probe_budget"] == 0.01
    settings, draft = split(method="gammatune_cost", model="d", probe_budget=0.05)
    assert settings.parameters["probe_budget"] == 0.05 and "probe_budget" not in draft
    assert settings.make_policy().probes.budget == 0.05


@pytest.mark.parametrize("gain", [-0.01, 1.0, "some", None])
def test_min_draft_gain_outside_its_interval(gain):
    with pytest.raises(GammaTuneConfigError) as info:
        split(method="gammatune_cost", model="d", min_draft_gain=gain)
    message = str(info.value)
    assert "min_draft_gain" in message and "[0, 1)" in message


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_keep_pace_takes_true_or_false_only(value):
    with pytest.raises(GammaTuneConfigError) as info:
        split(method="gammatune_cost", model="d", keep_pace=value)
    message = str(info.value)
    assert "keep_pace" in message and repr(value) in message and "true or false" in message


def test_keep_pace_default_and_given():
    settings, _ = split(method="gammatune_cost", model="d")
    assert settings.parameters["keep_pace"] is True and settings.make_policy().keep_pace
    settings, draft = split(method="gammatune_cost", model="d", keep_pace=False)
    assert not settings.make_policy().keep_pace and "keep_pace" not in draft


def test_min_draft_gain_default_and_given():
    settings, _ = split(method="gammatune_cost", model="d")
    assert settings.parameters["min_draft_gain"] == 0.05
    settings, draft = split(method="gammatune_cost", model="d", min_draft_gain=0.0)
    assert settings.make_policy().min_draft_gain == 0.0 and "min_draft_gain" not in draft


def test_the_ngram_drafter_maps_to_vllms_ngram_method():
    settings, vllm_config = split(method="gammatune_cost", drafter="ngram",
                                  prompt_lookup_min=2, prompt_lookup_max=4)
    assert settings.drafter == "ngram"
    assert vllm_config == {"method": "ngram", "num_speculative_tokens": 8,
                           "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    # no draft distribution: the per-token stop is off by default
    assert settings.parameters["token_stop"] is False
    assert MethodSettings.from_dict(settings.to_dict()) == settings
    # vLLM's defaults for the bounds stay vLLM's (none given: none passed)
    _, vllm_config = split(method="gammatune", drafter="ngram")
    assert vllm_config == {"method": "ngram", "num_speculative_tokens": 16}


def test_the_draft_model_drafter_is_the_default_and_keeps_the_per_token_stop():
    settings, _ = split(method="gammatune_cost", model="d")
    assert settings.drafter == "draft_model" and settings.parameters["token_stop"] is True
    # a worker's settings from before the drafter key read as the draft model
    data = settings.to_dict()
    del data["drafter"]
    assert MethodSettings.from_dict(data).drafter == "draft_model"


@pytest.mark.parametrize("method", ["gammatune_plus", "assistant_threshold", "adasd"])
def test_a_method_that_reads_draft_distributions_refuses_the_ngram_drafter(method):
    with pytest.raises(GammaTuneConfigError) as info:
        split(method=method, drafter="ngram")
    message = str(info.value)
    assert "'drafter'" in message and "'ngram'" in message and repr(method) in message


@pytest.mark.parametrize("config,words", [
    ({"drafter": "medusa"}, ["'drafter'", "'medusa'", "'draft_model', 'ngram'"]),
    ({"drafter": "ngram", "model": "d"}, ["'model'", "'d'", "runs no draft model"]),
    ({"drafter": "ngram", "prompt_lookup_min": 3, "prompt_lookup_max": 2},
     ["prompt_lookup_min", "3", "prompt_lookup_max=2"]),
    ({"drafter": "ngram", "prompt_lookup_min": 0}, ["prompt_lookup_min", "0", ">= 1"]),
    ({"drafter": "ngram", "prompt_lookup_max": 2.5}, ["prompt_lookup_max", "2.5", "integer"]),
    ({"model": "d", "prompt_lookup_max": 3}, ["prompt_lookup_max", "'draft_model'",
                                              "'ngram'"]),
    ({"method": "gammatune_cost", "drafter": "ngram", "token_stop": True},
     ["token_stop", "'ngram'", "unset or set it to false"]),
])
def test_bad_drafter_configs_name_field_value_and_allowed(config, words):
    config = {"method": "gammatune", **config}
    with pytest.raises(GammaTuneConfigError) as info:
        split(**config)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_the_ngram_front_keeps_its_bounds_and_runs_vllms_draft_model():
    settings, vllm_config = split(method="gammatune_cost", drafter="ngram+draft_model",
                                  model="d", prompt_lookup_min=2, prompt_lookup_max=4)
    assert settings.drafter == "ngram+draft_model"
    # vLLM's draft_model zeroes the n-gram keys: the plugin keeps them
    assert vllm_config == {"method": "draft_model", "model": "d", "num_speculative_tokens": 8}
    assert dict(settings.drafter_options) == {"prompt_lookup_min": 2, "prompt_lookup_max": 4}
    # the draft model's drafts keep the per-token stop
    assert settings.parameters["token_stop"] is True
    assert MethodSettings.from_dict(settings.to_dict()) == settings
    # vLLM's n-gram defaults where the bounds are not given, or one is
    settings, _ = split(method="gammatune_cost", drafter="ngram+draft_model", model="d")
    assert dict(settings.drafter_options) == {"prompt_lookup_min": 5, "prompt_lookup_max": 5}
    settings, _ = split(method="gammatune_cost", drafter="ngram+draft_model", model="d",
                        prompt_lookup_max=3)
    assert dict(settings.drafter_options) == {"prompt_lookup_min": 3, "prompt_lookup_max": 3}
    # the other drafters keep no options
    assert split(method="gammatune_cost", model="d")[0].to_dict().get("drafter_options") is None


@pytest.mark.parametrize("config,words", [
    ({"method": "gammatune", "model": "d"},
     ["'drafter'", "'ngram+draft_model'", "'gammatune'", "'gammatune_cost'"]),
    ({"method": "fixed_draft", "model": "d"}, ["'ngram+draft_model'", "'fixed_draft'"]),
    ({"method": "gammatune_cost"}, ["'model'", "missing", "'ngram+draft_model'"]),
    ({"method": "gammatune_cost", "model": "d", "prompt_lookup_min": 4,
      "prompt_lookup_max": 2}, ["prompt_lookup_min", "4", "prompt_lookup_max=2"]),
    ({"method": "gammatune_cost", "model": "d", "prompt_lookup_min": 0},
     ["prompt_lookup_min", "0", ">= 1"]),
])
def test_bad_ngram_front_configs_name_field_value_and_allowed(config, words):
    with pytest.raises(GammaTuneConfigError) as info:
        split(drafter="ngram+draft_model", **config)
    for word in words:
        assert word in str(info.value), (word, str(info.value))
