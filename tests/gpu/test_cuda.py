"""CUDA only: run wherever a GPU vLLM can use exists (``pytest -m gpu``).

This project's machines have no such GPU, so here every test is skipped with
the reason. The decisions they cover are also simulated on the CPU
(``tests/e2e/test_runner_choice.py``, ``tests/unit/test_runner_guard.py``);
these tests check the real thing: Model Runner V2 is vLLM's default on CUDA,
and the plugin's methods must still get their drafter, stay lossless with
CUDA graphs on, report that they are active, and not synchronise the device
on steps the cost-aware timers do not measure.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA device vLLM can use; none on this machine"),
]

PROMPTS = ["def add(a, b):", "The quick brown fox", "import os\nimport sys\n", "a"]
CUDA_KWARGS = dict(max_model_len=512, dtype="float16", seed=0, max_num_seqs=8,
                   gpu_memory_utilization=0.3, disable_log_stats=False)


def _generate(target, speculative_config=None, **overrides):
    from vllm import LLM, SamplingParams

    llm = LLM(model=target, speculative_config=speculative_config,
              **{**CUDA_KWARGS, **overrides})
    try:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=32))
        metrics = {m.name: m for m in llm.get_metrics()}
        return [list(o.outputs[0].token_ids) for o in outs], metrics
    finally:
        del llm


def test_triton_makes_v2_vllms_default_here(tiny_models):
    """The premise: on this machine vLLM would build Model Runner V2."""
    import vllm.config.vllm as vllm_config_module
    from vllm.engine.arg_utils import EngineArgs

    assert vllm_config_module.HAS_TRITON
    config = EngineArgs(model=tiny_models["target"], speculative_config={
        "method": "draft_model", "model": tiny_models["draft"], "num_speculative_tokens": 4},
        max_model_len=512).create_engine_config()
    assert config.use_v2_model_runner is True


@pytest.mark.parametrize("method", ["gammatune", "gammatune_plus", "gammatune_cost"])
def test_greedy_equality_with_cuda_graphs(tiny_models, method):
    reference, _ = _generate(tiny_models["target"])
    tokens, metrics = _generate(tiny_models["target"], {"method": method, "model": tiny_models["draft"],
                                                 "num_speculative_tokens": 4})
    assert tokens == reference
    info = metrics["vllm:gammatune_info"]
    assert info.value == 1 and info.labels["method"] == method
    assert info.labels["runner"] == "v1"


def _count_plugin_synchronisations(monkeypatch) -> list:
    """Record each torch.cuda.synchronize called from the plugin's own code."""
    import sys

    calls = []
    original = torch.cuda.synchronize

    def counting(*args, **kwargs):
        if sys._getframe(1).f_globals.get("__name__", "").startswith("vllm_gammatune"):
            calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.cuda, "synchronize", counting)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process
    return calls


def test_cost_timers_synchronise_only_on_measured_steps(tiny_models, monkeypatch):
    from vllm_gammatune.drafter import step_timing

    calls = _count_plugin_synchronisations(monkeypatch)
    _, metrics = _generate(tiny_models["target"], {"method": "gammatune_cost",
                                            "model": tiny_models["draft"],
                                            "num_speculative_tokens": 4})
    steps = int(metrics["vllm:gammatune_steps"].value)
    measured = steps // step_timing.CUDA_TIMING_PERIOD + 1
    # a measured step synchronises at its plan, before its first draft pass, after
    # each of at most 4 draft passes, around a catch-up, and at the next plan
    assert 0 < len(calls) <= measured * 8, (len(calls), steps)
    assert len(calls) < steps


def test_count_based_methods_never_call_the_timers_synchronise(tiny_models, monkeypatch):
    calls = _count_plugin_synchronisations(monkeypatch)
    _generate(tiny_models["target"], {"method": "gammatune", "model": tiny_models["draft"],
                               "num_speculative_tokens": 4})
    assert calls == []
