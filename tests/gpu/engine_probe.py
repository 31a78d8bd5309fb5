"""One engine of the GPU tier in its own process: every check's workload on it, the results as JSON.

    python tests/gpu/engine_probe.py '{"model": ..., "spec": ..., "engine": {...}, ...}'

``gpu_engines.engine_result`` starts it once per registered engine (``RUNS``):
a fresh process gets a fresh CUDA context, freed when it exits, and reads the
environment it was given before vLLM is imported (vLLM decides at import
whether to wrap its worker for the sync check; the runner variable). The
engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so
what the worker does is seen here:

- vLLM's sync check, ``VLLM_GPU_SYNC_CHECK=warn``: each GPU<->CPU sync that a
  checked step (``Worker.execute_model``, ``Worker.sample_tokens``) makes
  without ``gpu_sync_allowed()`` is a warning, recorded with its place, and
  the engine goes on; ``error`` would stop the engine at the first, and with
  it every other check made on that engine. A deliberate sync inside vLLM's
  checked wrapper first proves the check is armed;
- ``torch.cuda.synchronize`` called from the plugin's own code;
- the target's CUDA graph mode per step (vLLM's ``cudagraph_metrics``,
  counted by ``benchmarks.gpu_suite.CudaGraphModes``).

Workloads, in this order, as the run asks: ``graph_modes`` (the first
``GRAPH_BATCH`` prompts at once), ``greedy`` (every prompt), ``samples``
(seeded samples of one prompt). The last line printed is ``RESULT {json}``;
an engine that failed says why in it (``error``).
"""

from __future__ import annotations

import json
import sys
import traceback
import warnings

#: the text of torch's sync warning, and of vLLM's for a non_blocking copy that syncs
SYNC_TEXTS = ("called a synchronizing CUDA operation", "Implicit GPU<->CPU sync")


def count_plugin_synchronisations() -> list:
    """Record each torch.cuda.synchronize called from the plugin's own code."""
    import torch

    calls = []
    original = torch.cuda.synchronize

    def counting(*args, **kwargs):
        if sys._getframe(1).f_globals.get("__name__", "").startswith("vllm_gammatune"):
            calls.append(1)
        return original(*args, **kwargs)

    torch.cuda.synchronize = counting
    return calls


def sync_warnings(caught: list) -> list[str]:
    """The sync check's warnings among ``caught``, with their places."""
    return [f"{w.filename}:{w.lineno}: {w.message}" for w in caught
            if any(text in str(w.message) for text in SYNC_TEXTS)]


def sync_check_armed(caught: list) -> bool:
    """Whether a host read inside vLLM's checked wrapper is reported."""
    import torch
    from vllm.utils import gpu_sync_debug

    before = len(caught)
    gpu_sync_debug.with_gpu_sync_check(lambda: torch.ones(1, device="cuda").sum().item())()
    return bool(sync_warnings(caught[before:]))


def metric_values(llm) -> dict:
    """{name: value} of the engine's counters and gauges, and the plugin's info labels."""
    values = {}
    for metric in llm.get_metrics():
        if hasattr(metric, "value"):
            values[metric.name] = metric.value
        if metric.name == "vllm:gammatune_info":
            values["info_labels"] = dict(metric.labels)
    return values


def run_workloads(llm, run: dict, result: dict, caught: list) -> None:
    from vllm import SamplingParams

    from benchmarks.gpu_suite import CudaGraphModes

    prompts, workloads = run["prompts"], run["workloads"]
    modes = CudaGraphModes(llm)
    result["v2_model_runner"] = llm.llm_engine.vllm_config.use_v2_model_runner
    checked_from = len(caught)
    if "graph_modes" in workloads:
        count, tokens = workloads["graph_modes"]
        before = modes.snapshot()
        llm.generate(prompts[:count], SamplingParams(temperature=0, max_tokens=tokens,
                                                     ignore_eos=True), use_tqdm=False)
        result["graph_steps"] = CudaGraphModes.difference(before, modes.snapshot())
    if "greedy" in workloads:
        tokens = workloads["greedy"]
        drafted = metric_values(llm).get("vllm:spec_decode_num_draft_tokens", 0)
        outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=tokens,
                                                       ignore_eos=True), use_tqdm=False)
        result["greedy"] = [list(output.outputs[0].token_ids) for output in outputs]
        result["greedy_drafted"] = (
            metric_values(llm).get("vllm:spec_decode_num_draft_tokens", 0) - drafted)
    if "samples" in workloads:
        count, tokens = workloads["samples"]
        params = [SamplingParams(temperature=1.0, max_tokens=tokens, ignore_eos=True, seed=i)
                  for i in range(count)]
        outputs = llm.generate([prompts[-1]] * count, params, use_tqdm=False)
        result["samples"] = [list(output.outputs[0].token_ids) for output in outputs]
    result["metrics"] = metric_values(llm)
    result["sync_violations"] = sync_warnings(caught[checked_from:])


def probe(run: dict, result: dict) -> None:
    calls = count_plugin_synchronisations()  # before the plugin's drafter is built
    from gammatune_tools.bench.engine import start_llm, stop_llm

    # every warning is kept (none deduplicated): the sync check's are picked out
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        llm = start_llm(run["model"], run["spec"], **run["engine"])
        try:
            if run["sync_check"]:
                result["sync_check_armed"] = sync_check_armed(caught)
            run_workloads(llm, run, result, caught)
        finally:
            stop_llm(llm)
    result["plugin_synchronize_calls"] = len(calls)


def main(argv: list[str]) -> int:
    result: dict = {}
    try:
        probe(json.loads(argv[1]), result)
    except Exception:  # the engine failed: every check on it reports why
        result["error"] = traceback.format_exc()[-6000:]
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
