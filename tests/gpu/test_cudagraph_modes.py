"""CUDA only: the share of engine steps whose target forward ran a FULL or a PIECEWISE CUDA graph.

vLLM's V1 runner replays the target's FULL graph only for a uniform decode
batch (every request verifies exactly 1 + K tokens); per-request draft
lengths and steps without drafts make a batch non-uniform, and it runs the
PIECEWISE graphs (attention outside the graph). This measures how often
that happens for each plugin engine, from vLLM's cudagraph metrics
(``cudagraph_metrics=True``: each step's mode, counted by
``benchmarks.gpu_suite.CudaGraphModes``) over ``GRAPH_BATCH`` prompts
generated at once, beside vLLM's own ``draft_model`` on the same runner and
no speculation. A measurement, recorded in the pytest summary and in
``pytest_gpu.json`` (``conftest.py``), not a threshold: the tests fail only
if no step was counted.
"""

from __future__ import annotations

import pytest
from gpu_engines import PLUGIN_RUNS, needs_cuda

from benchmarks.gpu_suite import GRAPH_MODES

pytestmark = needs_cuda


@pytest.mark.parametrize("run", [*PLUGIN_RUNS, "target", "vllm_draft_model_v1"])
def test_target_graph_modes(engines, gpu_measurements, run):
    steps = engines(run)["graph_steps"]
    total = sum(steps.values())
    assert total > 0, f"{run}: vLLM reported no CUDA graph mode"
    assert set(steps) <= set(GRAPH_MODES), steps
    name = {"target": "no_spec", "vllm_draft_model_v1": "vllm_draft_model[v1]"}.get(run, run)
    gpu_measurements[f"cudagraph_steps[{name}]"] = {
        **steps, **{f"{mode}_share": round(steps.get(mode, 0) / total, 3)
                    for mode in ("FULL", "PIECEWISE")}}
