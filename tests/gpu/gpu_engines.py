"""The GPU tier's shared pieces: when it runs, its engines, its prompts, and
the plugin's methods as it configures them.

Every test of ``tests/gpu`` needs a CUDA device that vLLM uses; anywhere
else each is skipped with the reason (``needs_cuda``). Engines run as vLLM
runs on a GPU by default (CUDA graphs on, half precision), unlike the CPU
tier's eager float32 engines.

``RUNS`` is every engine the tier starts: each once a session, in its own
process (``engine_probe.py``), which runs every check's workload on it and
hands the results back; the tests read them (``engine_result``). Starting
an engine costs far more than any check made on it (``gammatune_tools.bench.gpu_budget``:
the tier must fit 10 minutes on one H100), so checks share engines, and a
method's engine is one configuration that serves all its checks. The
plugin's methods here cover each drafting path and each device-side stop:
the count-based policy (``gammatune``), the confidence stop with and
without probabilistic drafting (``gammatune_plus``, ``assistant_threshold``),
relaxed verification (``adasd``), the cost plan with its timers and
per-token stop (``gammatune_cost``), the lookup ahead of the draft model
(host path) and the n-gram drafter. ``fixed_draft``, ``hf_heuristic`` and
``gammatune_ngram`` differ from these only in the pure-Python policy, tested
on the CPU. No test module starts an engine any other way
(``tests/unit/test_gpu_suite.py`` checks it and holds ``RUNS`` to the budget).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).resolve().with_name("engine_probe.py")

#: the draft length (and the adaptive methods' cap) of every plugin engine here
K = 4

#: costs under which gammatune_cost drafts and its per-token stop ends drafts early
#: (measuring its own costs on the tiny pair, it may find that drafting never pays)
DRAFTING_COSTS = {"fixed_step_costs": {"target_step_s": 0.1, "target_token_s": 0.0,
                                       "draft_pass_s": 0.005, "draft_token_s": 0.0}}

#: every engine's arguments; max_num_seqs also bounds vLLM's default CUDA graph
#: capture sizes (up to 2 x max_num_seqs x (1 + K) tokens), so the capture stays short
ENGINE_KWARGS = dict(max_model_len=512, dtype="float16", seed=0, max_num_seqs=16,
                     gpu_memory_utilization=0.3, disable_log_stats=False,
                     enforce_eager=False, cudagraph_metrics=True)

#: a mixed batch, as vLLM's own spec-decode correctness tests build theirs
#: (a few templates times a few words)
PROMPTS = [template.format(word)
           for template in ("please repeat the word '{}' ten times:",
                            "a ten-word sentence that uses the word {}:",
                            "def {}(a, b):\n", "The {} jumps over the")
           for word in ("test", "temp", "hello", "where", "fox", "river")]

#: the workloads an engine can run: graph_modes (prompts at once, tokens),
#: greedy (tokens, every prompt), samples (seeded samples of the last prompt, tokens)
GRAPH_BATCH, GRAPH_TOKENS = 8, 64
GREEDY_TOKENS = 32
NUM_SAMPLES, SAMPLE_TOKENS = 1500, 4
CHECKED = {"graph_modes": (GRAPH_BATCH, GRAPH_TOKENS), "greedy": GREEDY_TOKENS}
SAMPLED = {**CHECKED, "samples": (NUM_SAMPLES, SAMPLE_TOKENS)}


@dataclasses.dataclass(frozen=True)
class Run:
    """One engine of the tier: the tiny model it serves, its harness method
    (``gammatune_tools.bench.methods``; None: no speculation) with additions
    to its speculative_config, its environment, its workloads, and whether
    vLLM's sync check watches it."""

    model: str = "target"
    method: str | None = None
    extra: dict = dataclasses.field(default_factory=dict)
    env: dict = dataclasses.field(default_factory=dict)
    workloads: dict = dataclasses.field(default_factory=lambda: dict(CHECKED))
    sync_check: bool = True


#: on CUDA the plugin's default anyway; forced, so the hot path is what is checked
_HOT = {"VLLM_GAMMATUNE_CUDA_HOT_PATH": "1"}

RUNS: dict[str, Run] = {
    # the references: the target alone, and the draft alone (the sampled test's power)
    "target": Run(workloads=SAMPLED, sync_check=False),
    "draft": Run(model="draft", workloads={"samples": SAMPLED["samples"]}, sync_check=False),
    # the control: vLLM's draft_model on the V1 runner, the runner the plugin gets
    "vllm_draft_model_v1": Run(method="vllm_draft_model",
                               env={"VLLM_USE_V2_MODEL_RUNNER": "0"}),
    "gammatune": Run(method="gammatune", env=_HOT, workloads=SAMPLED),
    "gammatune_plus": Run(method="gammatune_plus", env=_HOT, workloads=SAMPLED,
                          extra={"confidence_threshold": 0.5,
                                 "draft_sample_method": "probabilistic"}),
    "assistant_threshold": Run(method="assistant_threshold", env=_HOT),
    "adasd": Run(method="adasd", env=_HOT),
    "gammatune_cost": Run(method="gammatune_cost", env=_HOT, workloads=SAMPLED,
                          extra=DRAFTING_COSTS),
    # one-hot rows for the lookup's tokens beside the draft model's distributions
    "gammatune_cost_ngram_model": Run(method="gammatune_cost_ngram_model", env=_HOT,
                                      workloads=SAMPLED,
                                      extra={**DRAFTING_COSTS,
                                             "draft_sample_method": "probabilistic"}),
    # the n-gram drafter: host lookup and host plan, no draft model
    "gammatune_cost_ngram": Run(method="gammatune_cost_ngram", env=_HOT),
}

#: the plugin's engines, and the runs every check of the plugin's engines also reads
PLUGIN_RUNS = tuple(name for name, run in RUNS.items()
                    if run.method and run.method != "vllm_draft_model")
LOSSLESS_RUNS = ("gammatune", "gammatune_plus", "assistant_threshold", "gammatune_cost",
                 "gammatune_cost_ngram_model")
SAMPLED_RUNS = tuple(name for name in PLUGIN_RUNS if "samples" in RUNS[name].workloads)


def cuda_skip_reason() -> str | None:
    """Why this machine cannot run the GPU tier (None: it can)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "needs a CUDA device vLLM can use; torch.cuda.is_available() is False here"
    from vllm.platforms import current_platform

    if not current_platform.is_cuda():
        return f"this vLLM build runs on {current_platform.device_name!r}, not CUDA"
    return None


_SKIP_REASON = cuda_skip_reason()
needs_cuda = pytest.mark.skipif(_SKIP_REASON is not None, reason=_SKIP_REASON or "")


def speculative_config(run: Run, draft: str) -> dict | None:
    """A run's speculative_config at ``K``, as the benchmark harness builds it."""
    from gammatune_tools.bench.methods import speculative_config as harness_config

    if run.method is None:
        return None
    return {**harness_config(run.method, draft, K, K), **run.extra}


def probe_input(name: str, models: dict) -> dict:
    run = RUNS[name]
    return {"model": models[run.model], "spec": speculative_config(run, models["draft"]),
            "engine": ENGINE_KWARGS, "prompts": PROMPTS, "workloads": run.workloads,
            "sync_check": run.sync_check}


def probe_environment(run: Run) -> dict:
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", **run.env,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("VLLM_GPU_SYNC_CHECK", None)
    if run.sync_check:
        env["VLLM_GPU_SYNC_CHECK"] = "warn"
    return env


_RESULTS: dict[str, dict] = {}


def engine_result(name: str, models: dict) -> dict:
    """The results of the registered engine ``name``: its process runs once a
    session; a failed engine fails every test that reads it, with its error."""
    if name not in RUNS:
        raise KeyError(f"{name!r} is not in gpu_engines.RUNS: {', '.join(RUNS)}")
    if name not in _RESULTS:
        completed = subprocess.run(
            [sys.executable, str(PROBE), json.dumps(probe_input(name, models))], cwd=REPO,
            capture_output=True, text=True, timeout=900, env=probe_environment(RUNS[name]))
        lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
        _RESULTS[name] = (json.loads(lines[-1].removeprefix("RESULT ")) if lines else
                          {"error": f"exit code {completed.returncode}: "
                                    f"{completed.stderr[-6000:]}"})
    result = _RESULTS[name]
    if "error" in result:
        pytest.fail(f"engine {name!r} failed:\n{result['error']}", pytrace=False)
    return result
