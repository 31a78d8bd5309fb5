"""CUDA only (``pytest -m gpu``): the runner each method gets, and the plugin's synchronisations.

Model Runner V2 is vLLM's default on CUDA; the plugin's methods must still
get their drafter on the V1 runner and say so on ``/metrics``, and the
plugin's own code must never wait for the whole device: the cost-aware
timers read CUDA events once the device has passed them
(``vllm_gammatune/drafter/device_clock.py``), so no method, timed or not,
calls ``torch.cuda.synchronize``. The runner decisions are also simulated
on the CPU (``tests/e2e/test_runner_choice.py``,
``tests/unit/test_runner_guard.py``). Output quality is
``test_gpu_lossless.py``; vLLM's sync check is ``test_gpu_sync_check.py``;
the target's CUDA graph modes are ``test_cudagraph_modes.py``. Every check
reads the engines of ``gpu_engines.RUNS``.
"""

from __future__ import annotations

import pytest
from gpu_engines import GREEDY_TOKENS, PLUGIN_RUNS, PROMPTS, RUNS, needs_cuda

from gammatune_tools.bench.methods import VARIANTS

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


@pytest.mark.parametrize("run", PLUGIN_RUNS)
def test_every_plugin_engine_drafts_on_the_v1_runner_and_says_so(engines, run):
    result = engines(run)
    method, variant = VARIANTS.get(RUNS[run].method, (RUNS[run].method, {}))
    drafter = ("AdaptiveNgramProposer" if variant.get("drafter") == "ngram"
               else "AdaptiveDraftModelProposer")
    assert result["v2_model_runner"] is False
    assert [len(tokens) for tokens in result["greedy"]] == [GREEDY_TOKENS] * len(PROMPTS)
    assert result["metrics"]["vllm:gammatune_info"] == 1
    labels = result["metrics"]["info_labels"]
    assert labels["method"] == method
    assert labels["runner"] == "v1" and labels["drafter"] == drafter


@pytest.mark.parametrize("run", PLUGIN_RUNS)
def test_the_plugin_never_synchronises_the_device(engines, run):
    """Counted over the engine's start and every workload (``gammatune_cost``'s
    timers time one step in ``CUDA_TIMING_PERIOD``, and drafts under its given costs)."""
    result = engines(run)
    assert result["metrics"].get("vllm:gammatune_steps", 0) > 0
    assert result["plugin_synchronize_calls"] == 0
