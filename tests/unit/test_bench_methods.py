"""gammatune_tools.bench.methods: the harness's methods on the registry's."""

import os

import pytest

from gammatune_tools.bench.methods import (K_ROLE, METHOD_NAMES, NGRAM_KEYS, VARIANTS,
                                           check_method_names, drafts, engine_k, method_name,
                                           speculative_config)
from vllm_gammatune.methods import DEFAULT_ADASD_NUM_SPECULATIVE_TOKENS as W
from vllm_gammatune.methods import METHODS as REGISTRY

#: what every harness method ran as, for draft "d", k = 4 and cap = 16 (AdaSD:
#: its window W, the registry's default cap)
AT_K4_CAP16 = {
    "no_spec": None,
    "vllm_draft_model": {"method": "draft_model", "model": "d", "num_speculative_tokens": 4},
    "vllm_schedule": {"method": "draft_model", "model": "d", "num_speculative_tokens": 4,
                      "num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 1024, 0]]},
    "fixed_draft": {"method": "fixed_draft", "model": "d", "num_speculative_tokens": 4,
                    "gamma_init": 4},
    "hf_heuristic": {"method": "hf_heuristic", "model": "d", "num_speculative_tokens": 16,
                     "gamma_init": 4},
    "assistant_threshold": {"method": "assistant_threshold", "model": "d",
                            "num_speculative_tokens": 4, "gamma_init": 4},
    "gammatune": {"method": "gammatune", "model": "d", "num_speculative_tokens": 16,
                  "gamma_init": 4},
    "gammatune_plus": {"method": "gammatune_plus", "model": "d",
                       "num_speculative_tokens": 16, "gamma_init": 4},
    "gammatune_cost": {"method": "gammatune_cost", "model": "d", "num_speculative_tokens": 4},
    "gammatune_cost_never": {"method": "gammatune_cost", "model": "d",
                             "num_speculative_tokens": 4, "min_draft_gain": 0.999,
                             "probe_budget": 1e-9},
    "gammatune_cost_gpu_costs": {"method": "gammatune_cost", "model": "d",
                                 "num_speculative_tokens": 4,
                                 "fixed_step_costs": {"target_step_s": 0.020,
                                                      "target_token_s": 0.00005,
                                                      "draft_pass_s": 0.004,
                                                      "draft_token_s": 0.00001}},
    "adasd": {"method": "adasd", "model": "d", "num_speculative_tokens": W},
    "adasd_gen": {"method": "adasd", "model": "d", "num_speculative_tokens": W,
                  "adasd_mode": "generation"},
    "adasd_verify": {"method": "adasd", "model": "d", "num_speculative_tokens": W,
                     "adasd_mode": "verification"},
    "vllm_ngram": {"method": "ngram", "num_speculative_tokens": 4, **NGRAM_KEYS},
    "gammatune_ngram": {"method": "gammatune", "num_speculative_tokens": 16, "gamma_init": 4,
                        "drafter": "ngram", **NGRAM_KEYS},
    "gammatune_cost_ngram": {"method": "gammatune_cost", "num_speculative_tokens": 4,
                             "drafter": "ngram", **NGRAM_KEYS},
    "gammatune_cost_ngram_model": {"method": "gammatune_cost", "model": "d",
                                   "num_speculative_tokens": 4,
                                   "drafter": "ngram+draft_model", **NGRAM_KEYS},
}


@pytest.mark.parametrize("name", sorted(AT_K4_CAP16))
def test_every_method_runs_the_config_it_always_ran(name):
    config = speculative_config(name, "d", 4, 16)
    assert config == AT_K4_CAP16[name]
    if config is not None:  # the order of the keys too (the served command line)
        assert list(config) == list(AT_K4_CAP16[name])


def test_k_and_cap_set_each_kind_of_length():
    # an adaptive method may grow to the larger of k and the cap
    assert speculative_config("gammatune", "d", 20, 16)["num_speculative_tokens"] == 20
    assert speculative_config("gammatune", "d", 2, 8)["num_speculative_tokens"] == 8
    # a fixed length is k whatever the cap
    assert speculative_config("fixed_draft", "d", 2, 16)["num_speculative_tokens"] == 2
    # gammatune_cost's cap is k, at least 1
    assert speculative_config("gammatune_cost", "d", 0, 16)["num_speculative_tokens"] == 1
    # AdaSD ignores k: the registry's default cap, the paper's window
    assert speculative_config("adasd", "d", 3, 3)["num_speculative_tokens"] == W


def test_the_registrys_methods_are_all_here_and_nothing_else_of_the_plugin():
    assert set(K_ROLE) == set(REGISTRY)
    plugin = [name for name in METHOD_NAMES
              if (speculative_config(name, "d", 2, 8) or {}).get("method") in REGISTRY]
    assert [name for name in plugin if name not in VARIANTS] == list(REGISTRY)
    for name, (method, fixed) in VARIANTS.items():
        # the method's parameters, or the drafter and its vLLM keys
        assert set(fixed) <= {*REGISTRY[method].parameters, "drafter", *NGRAM_KEYS}, name
        assert METHOD_NAMES.index(name) > METHOD_NAMES.index(method)
    with pytest.raises(KeyError):
        speculative_config("nope", "d", 2, 8)


def test_unknown_method_names_the_entry_and_the_allowed_ones():
    check_method_names(["no_spec", "gammatune_cost"])
    with pytest.raises(ValueError, match="--methods: unknown 'gamatune'; allowed: no_spec, "):
        check_method_names(["gamatune"])
    check_method_names(["no_spec#2"], ["no_spec"], name_of=method_name)


def test_engine_entries_name_a_second_engine_or_a_length():
    assert method_name("no_spec#2") == "no_spec" == method_name("no_spec")
    assert method_name("vllm_draft_model@3#2") == "vllm_draft_model"
    assert engine_k("vllm_draft_model@3", 8) == 3 and engine_k("gammatune_cost", 8) == 8
    with pytest.raises(ValueError, match="after '@' must be an integer >= 1"):
        engine_k("vllm_draft_model@0", 8)
    assert not drafts("no_spec") and drafts("gammatune_cost")


def test_an_engine_suffix_sets_the_environment_its_engine_starts_with(monkeypatch):
    from gammatune_tools.bench.methods import (engine_environment, engine_k, method_name,
                                               started_with_environment)

    monkeypatch.delenv("VLLM_GAMMATUNE_CUDA_HOT_PATH", raising=False)
    assert method_name("gammatune_cost+hot#2") == "gammatune_cost"
    assert engine_k("vllm_draft_model@3+host", 1) == 3
    assert engine_environment("gammatune") == {}
    with started_with_environment("gammatune_cost+hot"):
        assert os.environ["VLLM_GAMMATUNE_CUDA_HOT_PATH"] == "1"
    assert "VLLM_GAMMATUNE_CUDA_HOT_PATH" not in os.environ
    with pytest.raises(ValueError, match=r"\+warm.*allowed: \+hot, \+host"):
        engine_environment("gammatune+warm")


def test_the_ngram_choices_run_no_draft_model():
    assert speculative_config("vllm_ngram", "d", 5, 8) == {
        "method": "ngram", "num_speculative_tokens": 5, **NGRAM_KEYS}
    cost = speculative_config("gammatune_cost_ngram", "d", 8, 8)
    assert cost == {"method": "gammatune_cost", "num_speculative_tokens": 8,
                    "drafter": "ngram", **NGRAM_KEYS}
    assert "model" not in speculative_config("gammatune_ngram", "d", 4, 16)
    assert not drafts("vllm_ngram") and not drafts("gammatune_cost_ngram")
    assert drafts("gammatune_cost") and drafts("vllm_draft_model")
    # the plugin accepts what the harness builds
    from vllm_gammatune.methods import split_speculative_config

    settings, vllm_config = split_speculative_config(cost, set(NGRAM_KEYS) | {
        "num_speculative_tokens", "method"})
    assert settings.drafter == "ngram" and vllm_config["method"] == "ngram"


def test_the_lookup_ahead_of_the_draft_model_holds_a_draft_model():
    config = speculative_config("gammatune_cost_ngram_model", "d", 8, 8)
    assert config["model"] == "d" and config["drafter"] == "ngram+draft_model"
    assert drafts("gammatune_cost_ngram_model")
    from vllm_gammatune.methods import split_speculative_config

    settings, vllm_config = split_speculative_config(config, set(NGRAM_KEYS) | {
        "num_speculative_tokens", "method", "model"})
    assert vllm_config == {"method": "draft_model", "model": "d", "num_speculative_tokens": 8}
    assert dict(settings.drafter_options) == dict(NGRAM_KEYS)
