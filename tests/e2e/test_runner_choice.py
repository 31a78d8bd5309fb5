"""Which model runner vLLM builds for each method, as a CUDA machine would decide.

On CUDA, Triton is present and vLLM 0.32/0.33 build Model Runner V2 by
default, where the plugin's drafter does not exist. This CPU has no Triton,
so vLLM falls back to the V1 runner here whatever the method. Making vLLM's
Triton check true inside the test (``vllm.config.vllm.HAS_TRITON``, read at
decision time) reproduces the CUDA decision on real configs of the tiny
models: every plugin method must get V1 through vLLM's own unsupported-feature
mechanism, while plain ``draft_model`` keeps V2 (so the test can fail).
"""

from __future__ import annotations

import pytest

from vllm_gammatune.methods import PLUGIN_METHODS


def _engine_config(tiny, speculative_config):
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(model=tiny["target"], speculative_config=speculative_config,
                      max_model_len=256, dtype="float32",
                      enforce_eager=True).create_engine_config()


@pytest.fixture
def triton_present(monkeypatch):
    import vllm.config.vllm as vllm_config_module

    monkeypatch.setattr(vllm_config_module, "HAS_TRITON", True)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)


@pytest.mark.parametrize("method", PLUGIN_METHODS)
def test_plugin_method_gets_v1_runner_where_triton_works(tiny, triton_present, method):
    config = _engine_config(tiny, {"method": method, "model": tiny["draft"],
                                   "num_speculative_tokens": 4})
    assert config.use_v2_model_runner is False
    assert f"speculative method '{method}' (vllm-gammatune)" in \
        config._get_v2_model_runner_unsupported_features()


def test_plain_draft_model_keeps_v2_runner_where_triton_works(tiny, triton_present):
    config = _engine_config(tiny, {"method": "draft_model", "model": tiny["draft"],
                                   "num_speculative_tokens": 4})
    assert config.use_v2_model_runner is True
    assert not any("vllm-gammatune" in f
                   for f in config._get_v2_model_runner_unsupported_features())


def test_no_triton_means_v1_for_every_method(tiny, monkeypatch):
    """This CPU's own decision (what every CPU test runs on)."""
    import vllm.config.vllm as vllm_config_module

    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    assert vllm_config_module.HAS_TRITON is False
    for spec in ({"method": "gammatune", "model": tiny["draft"]},
                 {"method": "draft_model", "model": tiny["draft"], "num_speculative_tokens": 4}):
        assert _engine_config(tiny, spec).use_v2_model_runner is False


@pytest.mark.parametrize("triton", [True, False])
def test_forcing_v2_with_plugin_method_is_refused(tiny, monkeypatch, triton):
    import vllm.config.vllm as vllm_config_module

    from vllm_gammatune.methods import GammaTuneConfigError

    monkeypatch.setattr(vllm_config_module, "HAS_TRITON", triton)
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    with pytest.raises(GammaTuneConfigError) as info:
        _engine_config(tiny, {"method": "gammatune_cost", "model": tiny["draft"]})
    message = str(info.value)
    assert "VLLM_USE_V2_MODEL_RUNNER=1" in message
    assert "'gammatune_cost'" in message and "V1 model runner" in message


def test_forcing_v1_keeps_plugin_method(tiny, triton_present, monkeypatch):
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    config = _engine_config(tiny, {"method": "gammatune", "model": tiny["draft"]})
    assert config.use_v2_model_runner is False


def test_decision_is_per_engine_not_per_process(tiny, triton_present):
    """A plugin engine does not push later plain engines of the process onto V1."""
    plugin = _engine_config(tiny, {"method": "gammatune", "model": tiny["draft"]})
    plain = _engine_config(tiny, {"method": "draft_model", "model": tiny["draft"],
                                  "num_speculative_tokens": 4})
    assert (plugin.use_v2_model_runner, plain.use_v2_model_runner) == (False, True)


def test_worker_confirms_the_plugin_drafter_on_metrics(tiny):
    """The plugin-active info metric appears once the worker confirmed its
    drafter, labelled with what it built; a plain engine has none."""
    from llm_helpers import drafter, metrics_by_name, running_llm

    from vllm_gammatune.drafter.proposer import AdaptiveDraftModelProposer

    with running_llm(tiny["target"], {"method": "gammatune_plus", "model": tiny["draft"],
                                      "num_speculative_tokens": 4}) as llm:
        assert isinstance(drafter(llm), AdaptiveDraftModelProposer)
        info = metrics_by_name(llm)["vllm:gammatune_info"]
        assert info.value == 1
        assert {k: info.labels[k] for k in ("method", "runner", "drafter")} == {
            "method": "gammatune_plus", "runner": "v1", "drafter": "AdaptiveDraftModelProposer"}
    with running_llm(tiny["target"]) as llm:
        assert "vllm:gammatune_info" not in metrics_by_name(llm)
