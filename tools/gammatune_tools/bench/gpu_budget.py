"""The GPU commands' time budget on one H100, counted from their plans (no GPU needed).

Nothing here has run on a GPU: the figures are pessimistic assumptions, kept in
this one place (docs/cuda.md, "The GPU suite's time budget", says where they
come from) so that the unit tests (``tests/unit/test_gpu_suite.py``) hold
``python -m benchmarks.reproduce gpu --quick`` and ``pytest -m gpu`` to them:

- an engine start (``ENGINE_START_S``, per model pair): its process starting
  and importing vLLM, the weights, torch.compile with a cold compile cache,
  the memory profile, and CUDA graph capture at vLLM's default sizes for the
  engine's ``max_num_seqs``; every start is counted cold, although vLLM's and
  Inductor's caches (``~/.cache/vllm``, ``/tmp/torchinductor_$USER``) are
  shared by all the processes and make later starts shorter;
- generation: each sequential batch of requests takes ``max_tokens + 1``
  engine steps (its prefill, then at least one token per request a step;
  speculation only shortens it), each ``STEP_S``;
- once per command, ``OVERHEAD_S``: the suite's parent process (vLLM import,
  vocabulary check, context), or pytest's collection and the tiny models'
  build.

``python -m benchmarks.gpu_suite ... --dry-run`` prints its plan's budget.
"""

from __future__ import annotations

import dataclasses
import math

#: seconds to start one engine with a cold compile cache, pessimistic: the real
#: pair (Qwen2.5-Coder-1.5B-Instruct target, 0.5B draft) and the tiny test pair
ENGINE_START_S = {"qwen": 90.0, "tiny": 45.0}

#: seconds per engine step (a decode step, or a speculative step of up to K
#: draft passes and a verification), pessimistic for both pairs at batch <= 32
STEP_S = 0.010

#: seconds per command outside its engines
OVERHEAD_S = {"gpu_suite": 30.0, "pytest": 60.0}

#: what each command must fit in, on one H100 (a 15-minute lease each)
LIMIT_S = {"gpu_suite --quick": 12 * 60.0, "pytest -m gpu": 10 * 60.0}


def steps(requests: int, concurrency: int, max_tokens: int) -> int:
    """Engine steps to serve ``requests`` of ``max_tokens``, ``concurrency`` at a time."""
    return math.ceil(requests / concurrency) * (max_tokens + 1) if requests else 0


def suite_engine_steps(batch_sizes: list[int], prompts: int, max_tokens: int) -> int:
    """One gpu_suite engine: per cell, its warm-up request, then its prompts in batches."""
    return sum(steps(1, 1, max_tokens) + steps(prompts, size, max_tokens)
               for size in batch_sizes)


@dataclasses.dataclass(frozen=True)
class Budget:
    """A command's pessimistic time: engine starts, engine steps, its fixed overhead."""

    engines: int
    steps: int
    pair: str
    overhead_s: float

    @property
    def seconds(self) -> float:
        return self.engines * ENGINE_START_S[self.pair] + self.steps * STEP_S + self.overhead_s

    def line(self) -> str:
        return (f"{self.engines} engines x {ENGINE_START_S[self.pair]:.0f} s + {self.steps} "
                f"steps x {STEP_S * 1000:.0f} ms + {self.overhead_s:.0f} s = "
                f"{self.seconds / 60:.1f} min (pessimistic)")


def suite_budget(engines: int, batch_sizes: list[int], prompts: int,
                 max_tokens: int) -> Budget:
    """``gpu_suite``: ``engines`` processes, each running every batch size's cell."""
    return Budget(engines, engines * suite_engine_steps(batch_sizes, prompts, max_tokens),
                  "qwen", OVERHEAD_S["gpu_suite"])


def probe_steps(workloads: dict, max_num_seqs: int, prompts: int) -> int:
    """One engine of ``pytest -m gpu`` (``tests/gpu/engine_probe.py``): its
    ``graph_modes`` (prompts at once, tokens), ``greedy`` (tokens, every prompt)
    and ``samples`` (requests, tokens), ``max_num_seqs`` at a time."""
    total = 0
    if "graph_modes" in workloads:
        count, tokens = workloads["graph_modes"]
        total += steps(count, min(count, max_num_seqs), tokens)
    if "greedy" in workloads:
        total += steps(prompts, max_num_seqs, workloads["greedy"])
    if "samples" in workloads:
        count, tokens = workloads["samples"]
        total += steps(count, max_num_seqs, tokens)
    return total


def pytest_budget(workloads: list[dict], max_num_seqs: int, prompts: int) -> Budget:
    """``pytest -m gpu``: one engine per entry of ``workloads`` (each engine's)."""
    return Budget(len(workloads), sum(probe_steps(w, max_num_seqs, prompts) for w in workloads),
                  "tiny", OVERHEAD_S["pytest"])
