"""CUDA only: every plugin method serves requests under vLLM's own sync check.

``VLLM_GPU_SYNC_CHECK=error`` makes vLLM raise in a worker when the code of
a step (``Worker.execute_model``, ``Worker.sample_tokens``) waits for the
device without saying so (``vllm.utils.gpu_sync_debug``); the engine then
dies. vLLM arms it only on CUDA platforms and decides at import whether to
wrap the worker's methods, so each engine here runs in a fresh Python
process with the variable set before vLLM is imported, the engine inside
that process, and the CUDA hot path forced on (``VLLM_GAMMATUNE_CUDA_HOT_PATH=1``,
the default on CUDA anyway). The process first proves the check is armed:
a deliberate host read inside vLLM's checked wrapper must raise.

vLLM's own ``draft_model`` on the V1 runner runs the same way, as the
control: if it fails, the V1 runner itself is not clean under the check on
this vLLM, and a plugin failure says nothing about the plugin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from gpu_engines import DRAFTING_COSTS, ENGINE_KWARGS, PROMPTS, needs_cuda, plugin_spec

from vllm_gammatune.methods import PLUGIN_METHODS

pytestmark = needs_cuda

REPO = Path(__file__).resolve().parents[2]
MAX_TOKENS = 32

ENGINE_UNDER_CHECK = textwrap.dedent("""
    import json, sys
    import torch
    from vllm import LLM, SamplingParams
    from vllm.utils import gpu_sync_debug

    run = json.loads(sys.argv[1])
    llm = LLM(model=run["target"], speculative_config=run["spec"], **run["engine"])
    probe = gpu_sync_debug.with_gpu_sync_check(lambda: torch.ones(1, device="cuda").sum().item())
    try:
        probe()
        armed = False
    except RuntimeError as error:
        armed = gpu_sync_debug.SYNC_ERROR_MESSAGE in str(error)
    outputs = llm.generate(run["prompts"], SamplingParams(
        temperature=0, max_tokens=run["max_tokens"], ignore_eos=True), use_tqdm=False)
    print("RESULT " + json.dumps({"armed": armed,
                                  "lengths": [len(o.outputs[0].token_ids) for o in outputs]}))
""")


def serve_under_check(target: str, spec: dict, env: dict) -> dict:
    """Generate ``PROMPTS`` in a fresh process under ``VLLM_GPU_SYNC_CHECK=error``."""
    run = {"target": target, "spec": spec, "prompts": PROMPTS, "max_tokens": MAX_TOKENS,
           "engine": ENGINE_KWARGS}
    result = subprocess.run(
        [sys.executable, "-c", ENGINE_UNDER_CHECK, json.dumps(run)], cwd=REPO,
        capture_output=True, text=True, timeout=1800,
        env={**os.environ, "VLLM_GPU_SYNC_CHECK": "error", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
             **env})
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-6000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


@pytest.mark.parametrize("method,extra", [
    *[(m, {}) for m in PLUGIN_METHODS],
    ("gammatune_cost", DRAFTING_COSTS),
    # the n-gram drafter: host lookup and host plan, no draft tensor read
    ("gammatune_cost_ngram", {}),
    ("gammatune_ngram", {}),
])
def test_plugin_method_serves_under_vllms_sync_check(tiny_models, method, extra):
    outcome = serve_under_check(tiny_models["target"],
                                plugin_spec(method, tiny_models["draft"], **extra),
                                {"VLLM_GAMMATUNE_CUDA_HOT_PATH": "1"})
    assert outcome["armed"], "vLLM's sync check was not armed in the engine's process"
    assert outcome["lengths"] == [MAX_TOKENS] * len(PROMPTS)


def test_control_vllms_draft_model_on_the_v1_runner_serves_under_the_check(tiny_models):
    spec = {"method": "draft_model", "model": tiny_models["draft"], "num_speculative_tokens": 4}
    outcome = serve_under_check(tiny_models["target"], spec, {"VLLM_USE_V2_MODEL_RUNNER": "0"})
    assert outcome["armed"]
    assert outcome["lengths"] == [MAX_TOKENS] * len(PROMPTS)
