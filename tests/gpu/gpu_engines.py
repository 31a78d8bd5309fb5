"""The GPU tier's shared pieces: when it runs, its engines, its prompts, and
the plugin's methods as it configures them.

Every test of ``tests/gpu`` needs a CUDA device that vLLM uses; anywhere
else each is skipped with the reason (``needs_cuda``). Engines run as vLLM
runs on a GPU by default (CUDA graphs on, half precision), unlike the CPU
tier's eager float32 engines, and each in the engine process vLLM starts.
"""

from __future__ import annotations

import contextlib

import pytest

#: the draft length (and the adaptive methods' cap) of every plugin engine here
K = 4

#: costs under which gammatune_cost drafts and its per-token stop ends drafts early
#: (measuring its own costs on the tiny pair, it may find that drafting never pays)
DRAFTING_COSTS = {"fixed_step_costs": {"target_step_s": 0.1, "target_token_s": 0.0,
                                       "draft_pass_s": 0.005, "draft_token_s": 0.0}}

ENGINE_KWARGS = dict(max_model_len=512, dtype="float16", seed=0, max_num_seqs=16,
                     gpu_memory_utilization=0.3, disable_log_stats=False,
                     enforce_eager=False)

#: a mixed batch, as vLLM's own spec-decode correctness tests build theirs
#: (a few templates times a few words)
PROMPTS = [template.format(word)
           for template in ("please repeat the word '{}' ten times:",
                            "a ten-word sentence that uses the word {}:",
                            "def {}(a, b):\n", "The {} jumps over the")
           for word in ("test", "temp", "hello", "where", "fox", "river")]


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


def plugin_spec(method: str, draft: str, **extra) -> dict:
    """A plugin method's speculative_config at ``K``, as the benchmark harness builds it."""
    from gammatune_tools.bench.methods import speculative_config

    return {**speculative_config(method, draft, K, K), **extra}


@contextlib.contextmanager
def running_engine(target: str, speculative_config: dict | None = None, **overrides):
    """An engine with CUDA graphs on. vLLM caches its environment variables
    once an engine core has started in a process; the cache is dropped first,
    so each engine reads the variables its test set (the model runner's)."""
    import vllm.envs

    from gammatune_tools.bench.engine import start_llm, stop_llm

    vllm.envs.disable_envs_cache()
    llm = start_llm(target, speculative_config, **{**ENGINE_KWARGS, **overrides})
    try:
        yield llm
    finally:
        stop_llm(llm)


def greedy_tokens(llm, prompts=PROMPTS, max_tokens: int = 32) -> list[list[int]]:
    from vllm import SamplingParams

    outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=max_tokens,
                                                   ignore_eos=True), use_tqdm=False)
    return [list(output.outputs[0].token_ids) for output in outputs]


def engine_metrics(llm) -> dict:
    """{name: metric} of the engine's metrics (vLLM's and the plugin's)."""
    return {metric.name: metric for metric in llm.get_metrics()}
