"""Count the plugin's reads of tensor values on the host, per engine step.

On a GPU, reading a tensor's values on the host (``tolist``, ``item``,
``cpu``, ``numpy``, ``bool``/``int``/``float``, ``.to("cpu")``) makes the
host wait until the device has finished everything queued before it. The
CPU has no such wait, so the count stands in for it: ``count_host_reads``
wraps those methods of ``torch.Tensor`` and records each call whose caller is
a module of ``vllm_gammatune``, together with two marks per engine step: the
step's start (``GPUModelRunner.execute_model``) and the start of each draft
forward pass (the draft model's ``forward``). vLLM's own reads are not
counted: they are there with or without the plugin.

    python tests/e2e/host_reads.py            # every method, both paths

prints reads per engine step, and reads before the first draft pass of a
step, for each plugin method on the tiny models.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys

import torch

#: the methods of ``torch.Tensor`` that read values on the host
READING_METHODS = ("tolist", "item", "cpu", "numpy", "__bool__", "__int__", "__float__",
                   "__index__", "__array__")
PLUGIN = "vllm_gammatune"


class ReadLog:
    """Events in order: ("step",), ("pass",), ("read", where)."""

    def __init__(self):
        self.events: list[tuple] = []

    def steps(self) -> list[list[tuple]]:
        """The events of each engine step that ran draft passes or reads."""
        steps, current = [], None
        for event in self.events:
            if event[0] == "step":
                current = []
                steps.append(current)
            elif current is not None:
                current.append(event)
        return [s for s in steps if s]

    def reads_per_step(self) -> float:
        steps = self.steps()
        reads = sum(1 for s in steps for e in s if e[0] == "read")
        return reads / max(1, len(steps))

    def max_reads_in_a_step(self) -> int:
        return max((sum(1 for e in s if e[0] == "read") for s in self.steps()), default=0)

    def reads_before_first_pass(self) -> list[str]:
        """Where a step that ran draft passes read before its first one (a
        step without a draft pass has nothing to launch first: its reads
        count in ``max_reads_in_a_step`` alone)."""
        early = []
        for step in self.steps():
            if not any(event[0] == "pass" for event in step):
                continue
            for event in step:
                if event[0] == "pass":
                    break
                early.append(event[1])
        return early

    def where(self) -> collections.Counter:
        return collections.Counter(e[1] for e in self.events if e[0] == "read")


def _plugin_caller() -> str | None:
    frame = sys._getframe(2)
    name = frame.f_globals.get("__name__", "")
    if name.startswith(PLUGIN):
        return f"{name}:{frame.f_lineno}"
    return None


@contextlib.contextmanager
def count_host_reads(runner):
    """Record the plugin's host reads inside ``runner`` (an in-process V1
    model runner whose drafter is the plugin's) until the block ends."""
    log = ReadLog()
    originals = {}

    def wrap(name):
        original = getattr(torch.Tensor, name)
        originals[name] = original

        def reading(self, *args, **kwargs):
            caller = _plugin_caller()
            if caller is not None:
                log.events.append(("read", caller))
            return original(self, *args, **kwargs)

        return reading

    def to(self, *args, **kwargs):
        target = kwargs.get("device", args[0] if args else None)
        if isinstance(target, str | torch.device) and torch.device(target).type == "cpu":
            caller = _plugin_caller()
            if caller is not None:
                log.events.append(("read", caller))
        return originals["to"](self, *args, **kwargs)

    for name in READING_METHODS:
        setattr(torch.Tensor, name, wrap(name))
    originals["to"] = torch.Tensor.to
    torch.Tensor.to = to

    execute = runner.execute_model
    forward = runner.drafter.model.forward

    def execute_model(*args, **kwargs):
        log.events.append(("step",))
        return execute(*args, **kwargs)

    def draft_forward(*args, **kwargs):
        log.events.append(("pass",))
        return forward(*args, **kwargs)

    runner.execute_model = execute_model
    runner.drafter.model.forward = draft_forward
    try:
        yield log
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
        runner.execute_model = execute
        runner.drafter.model.forward = forward


def model_runner(llm):
    """The model runner of an in-process engine (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)."""
    executor = llm.llm_engine.engine_core.engine_core.model_executor
    return executor.driver_worker.worker.model_runner


def _main() -> None:  # pragma: no cover - a measurement printed for the docs
    from llm_helpers import PROMPTS, running_llm
    from record_behaviour import CONFIGS
    from tiny_models import build_tiny_models
    from vllm import SamplingParams

    models = build_tiny_models(os.environ.get("VLLM_GAMMATUNE_TINY_MODELS", "/tmp/tiny"))
    for name, extra in CONFIGS.items():
        spec = {"model": models["draft"], "num_speculative_tokens": 8, **extra}
        with running_llm(models["target"], spec) as llm:
            with count_host_reads(model_runner(llm)) as log:
                llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=32),
                             use_tqdm=False)
        print(f"{name}: {log.reads_per_step():.2f} reads per step, at most "
              f"{log.max_reads_in_a_step()}; {len(log.reads_before_first_pass())} before "
              f"a step's first draft pass; by place: {dict(log.where().most_common(6))}")


if __name__ == "__main__":
    _main()
