"""CUDA only: the share of engine steps whose target forward ran a FULL or a PIECEWISE CUDA graph.

vLLM's V1 runner replays the target's FULL graph only for a uniform decode
batch (every request verifies exactly 1 + K tokens); per-request draft
lengths and steps without drafts make a batch non-uniform, and it runs the
PIECEWISE graphs (attention outside the graph). This measures how often
that happens for each method, from vLLM's cudagraph metrics
(``cudagraph_metrics=True``: each step's mode, counted by
``benchmarks.gpu_suite.CudaGraphModes``), beside vLLM's own ``draft_model``
on the same runner and no speculation. A measurement, recorded in the
pytest summary and in ``pytest_gpu.json`` (``conftest.py``), not a
threshold: the tests fail only if no step was counted.
"""

from __future__ import annotations

import pytest
from gpu_engines import PROMPTS, greedy_tokens, needs_cuda, plugin_spec, running_engine

from benchmarks.gpu_suite import GRAPH_MODES, CudaGraphModes
from vllm_gammatune.methods import PLUGIN_METHODS

pytestmark = needs_cuda

BATCH = 8


def _graph_steps(target: str, spec: dict | None) -> dict[str, int]:
    with running_engine(target, spec, cudagraph_metrics=True, max_num_seqs=BATCH) as llm:
        modes = CudaGraphModes(llm)
        greedy_tokens(llm, PROMPTS[:BATCH], max_tokens=64)
        return modes.snapshot()


def _record(gpu_measurements: dict, name: str, steps: dict[str, int]) -> None:
    total = sum(steps.values())
    assert total > 0, f"{name}: vLLM reported no CUDA graph mode"
    assert set(steps) <= set(GRAPH_MODES), steps
    gpu_measurements[f"cudagraph_steps[{name}]"] = {
        **steps, **{f"{mode}_share": round(steps.get(mode, 0) / total, 3)
                    for mode in ("FULL", "PIECEWISE")}}


@pytest.mark.parametrize("method", PLUGIN_METHODS)
def test_target_graph_modes_of_each_plugin_method(tiny_models, gpu_measurements, method):
    steps = _graph_steps(tiny_models["target"], plugin_spec(method, tiny_models["draft"]))
    _record(gpu_measurements, method, steps)


def test_target_graph_modes_of_vllms_draft_model_on_v1_and_of_no_speculation(
        tiny_models, gpu_measurements, monkeypatch):
    _record(gpu_measurements, "no_spec", _graph_steps(tiny_models["target"], None))
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    spec = {"method": "draft_model", "model": tiny_models["draft"], "num_speculative_tokens": 4}
    _record(gpu_measurements, "vllm_draft_model[v1]", _graph_steps(tiny_models["target"], spec))
