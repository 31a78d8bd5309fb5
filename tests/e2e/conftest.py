"""Engine-level test setup: vLLM on the CPU with tiny models built on the fly."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
# The engine core runs inside the test process: ~30 s less per engine start
# than spawning an engine process and a worker process. The server tests
# cover the spawned path (the plugin loaded in every vLLM process).
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


@pytest.fixture(scope="session")
def tiny(tiny_models) -> dict:
    return tiny_models
