"""Helpers for engine-level tests: start, stop and read a tiny-model LLM."""

from __future__ import annotations

import contextlib

#: Prompts of different kinds and lengths (a mixed batch).
PROMPTS = [
    "def add(a, b):",
    "The quick brown fox jumps over the lazy dog. " * 6,
    "x",
    "import os\nimport sys\n\nfor path in sys.argv:\n",
    "hello world " * 20,
    "class Foo:\n    def __init__(self):",
    "Once upon a time",
    "1 2 3 4 5 6 7 8 9 10 11 12",
    "speculative decoding verifies draft tokens in one pass of the target model",
    "a",
]

ENGINE_KWARGS = dict(
    enforce_eager=True,
    max_model_len=512,
    dtype="float32",
    disable_log_stats=False,
    seed=0,
    max_num_seqs=16,
    # fraction of CPU memory vLLM checks is free at start (tiny models need little)
    gpu_memory_utilization=0.2,
)


def make_llm(target: str, speculative_config: dict | None = None, **overrides):
    from gammatune_tools.bench.engine import start_llm

    return start_llm(target, speculative_config, **{**ENGINE_KWARGS, **overrides})


@contextlib.contextmanager
def running_llm(target: str, speculative_config: dict | None = None, **overrides):
    from gammatune_tools.bench.engine import stop_llm

    llm = make_llm(target, speculative_config, **overrides)
    try:
        yield llm
    finally:
        stop_llm(llm)


def metrics_by_name(llm) -> dict:
    """{name: metric} for vLLM's spec-decode metrics and the plugin's."""
    return {
        m.name: m
        for m in llm.get_metrics()
        if "spec_decode" in m.name or "gammatune" in m.name
    }


def executor(llm):
    """The model executor of an in-process engine (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)."""
    return llm.llm_engine.engine_core.engine_core.model_executor


def drafter(llm):
    """The plugin's drafter inside an in-process engine."""
    return executor(llm).driver_worker.worker.model_runner.drafter


def record_draft_fetches(llm) -> list:
    """Record every ``take_draft_token_ids`` round trip the engine core makes
    from now on (in-process engine); returns the list the answers go to."""
    engine_executor = executor(llm)
    fetched = []
    original = engine_executor.take_draft_token_ids

    def recording():
        answer = original()
        fetched.append(answer)
        return answer

    engine_executor.take_draft_token_ids = recording
    return fetched
