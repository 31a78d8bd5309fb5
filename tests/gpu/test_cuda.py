"""CUDA only (``pytest -m gpu``): the runner each method gets, and the timers' synchronisations.

Model Runner V2 is vLLM's default on CUDA; the plugin's methods must still
get their drafter on the V1 runner and say so on ``/metrics``, and the
cost-aware timers must not synchronise the device on the steps they do not
measure. The runner decisions are also simulated on the CPU
(``tests/e2e/test_runner_choice.py``, ``tests/unit/test_runner_guard.py``).
Output quality is ``test_gpu_lossless.py``; vLLM's sync check is
``test_gpu_sync_check.py``; the target's CUDA graph modes are
``test_cudagraph_modes.py``.
"""

from __future__ import annotations

import sys

import pytest
from gpu_engines import PROMPTS, engine_metrics, greedy_tokens, needs_cuda, plugin_spec, running_engine

from vllm_gammatune.methods import PLUGIN_METHODS

pytestmark = needs_cuda


def test_triton_makes_v2_vllms_default_here(tiny_models):
    """The premise: on this machine vLLM would build Model Runner V2."""
    import vllm.config.vllm as vllm_config_module
    import vllm.envs
    from vllm.engine.arg_utils import EngineArgs

    vllm.envs.disable_envs_cache()  # VLLM_USE_V2_MODEL_RUNNER as this process has it now
    assert vllm_config_module.HAS_TRITON
    config = EngineArgs(model=tiny_models["target"], speculative_config={
        "method": "draft_model", "model": tiny_models["draft"], "num_speculative_tokens": 4},
        max_model_len=512).create_engine_config()
    assert config.use_v2_model_runner is True


@pytest.mark.parametrize("name,method,drafter", [
    *[(m, m, "AdaptiveDraftModelProposer") for m in PLUGIN_METHODS],
    # the n-gram drafter (the lookup and the plan on the host)
    ("gammatune_ngram", "gammatune", "AdaptiveNgramProposer"),
    ("gammatune_cost_ngram", "gammatune_cost", "AdaptiveNgramProposer"),
    # the lookup ahead of the draft model (the host path: one read a step)
    ("gammatune_cost_ngram_model", "gammatune_cost", "AdaptiveDraftModelProposer"),
])
def test_every_plugin_method_drafts_on_the_v1_runner_and_says_so(tiny_models, name, method,
                                                                  drafter):
    with running_engine(tiny_models["target"], plugin_spec(name, tiny_models["draft"])) as llm:
        tokens = greedy_tokens(llm, PROMPTS[:4], max_tokens=16)
        metrics = engine_metrics(llm)
        assert llm.llm_engine.vllm_config.use_v2_model_runner is False
    assert [len(t) for t in tokens] == [16] * 4
    info = metrics["vllm:gammatune_info"]
    assert info.value == 1 and info.labels["method"] == method
    assert info.labels["runner"] == "v1" and info.labels["drafter"] == drafter


def _count_plugin_synchronisations(monkeypatch) -> list:
    """Record each torch.cuda.synchronize called from the plugin's own code
    (the engine runs in this process, so its workers' calls are seen)."""
    import torch

    calls = []
    original = torch.cuda.synchronize

    def counting(*args, **kwargs):
        if sys._getframe(1).f_globals.get("__name__", "").startswith("vllm_gammatune"):
            calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.cuda, "synchronize", counting)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return calls


def test_cost_timers_synchronise_only_on_measured_steps(tiny_models, monkeypatch):
    from vllm_gammatune.drafter import step_timing

    calls = _count_plugin_synchronisations(monkeypatch)
    with running_engine(tiny_models["target"],
                        plugin_spec("gammatune_cost", tiny_models["draft"])) as llm:
        greedy_tokens(llm, PROMPTS[:4])
        steps = int(engine_metrics(llm)["vllm:gammatune_steps"].value)
    measured = steps // step_timing.CUDA_TIMING_PERIOD + 1
    # a measured step synchronises at its plan, before its first draft pass, after
    # each of at most 4 draft passes, around a catch-up, and at the next plan
    assert 0 < len(calls) <= measured * 8, (len(calls), steps)
    assert len(calls) < steps


def test_count_based_methods_never_call_the_timers_synchronise(tiny_models, monkeypatch):
    calls = _count_plugin_synchronisations(monkeypatch)
    with running_engine(tiny_models["target"],
                        plugin_spec("gammatune", tiny_models["draft"])) as llm:
        greedy_tokens(llm, PROMPTS[:4])
    assert calls == []
