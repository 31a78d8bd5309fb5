"""CUDA only: every plugin engine serves requests under vLLM's own sync check.

vLLM's sync check (``VLLM_GPU_SYNC_CHECK``, ``vllm.utils.gpu_sync_debug``)
reports each GPU<->CPU sync that the code of a step (``Worker.execute_model``,
``Worker.sample_tokens``) makes without saying so (``gpu_sync_allowed()``).
vLLM arms it only on CUDA platforms and decides at import whether to wrap
the worker's methods, so each engine runs in a fresh process with the
variable set before vLLM is imported and the engine inside that process
(``engine_probe.py``), the CUDA hot path forced on
(``VLLM_GAMMATUNE_CUDA_HOT_PATH=1``, the default on CUDA anyway). It runs in
``warn`` mode, each report recorded with its place: the same detection as
``error``, which would stop the engine at the first report and with it the
other checks made on that engine. The process first proves the check is
armed: a deliberate host read inside vLLM's checked wrapper must be reported.

vLLM's own ``draft_model`` on the V1 runner runs the same way, as the
control: if it fails, the V1 runner itself is not clean under the check on
this vLLM, and a plugin failure says nothing about the plugin.
"""

from __future__ import annotations

import pytest
from gpu_engines import GREEDY_TOKENS, PLUGIN_RUNS, PROMPTS, needs_cuda

pytestmark = needs_cuda


@pytest.mark.parametrize("run", [*PLUGIN_RUNS, "vllm_draft_model_v1"])
def test_engine_serves_under_vllms_sync_check(engines, run):
    result = engines(run)
    assert result["sync_check_armed"], "vLLM's sync check was not armed in the engine's process"
    assert result["sync_violations"] == []
    assert [len(tokens) for tokens in result["greedy"]] == [GREEDY_TOKENS] * len(PROMPTS)
