"""Count what the plugin does on the host that, on a GPU, waits for the device.

On a GPU the host waits until the device has finished everything queued
when it reads a tensor's values (``tolist``, ``item``, ``cpu``, ``numpy``,
``bool``/``int``/``float``, ``.to("cpu")``, ``host.copy_(device)``), when it
copies host data to the device without ``non_blocking=True``
(``torch.tensor(data, device=...)``, ``torch.as_tensor``, ``.to(device)``,
``.cuda()``, ``device.copy_(host)``) and at ``torch.cuda.synchronize``. The
CPU has no such wait, so the calls are counted instead: ``count_host_reads``
wraps those functions and records each call whose caller is a module of
``vllm_gammatune`` as ("read", where), ("copy", where) or ("sync", where),
with two marks per engine step: the step's start
(``GPUModelRunner.execute_model``) and the start of each draft forward pass
(the draft model's ``forward``). vLLM's own calls are not counted: they are
there with or without the plugin. A recorded ``synchronize`` is not run (on
the CPU it would raise).

On the CPU, host and device memory are one, so what is host data is told
by how the plugin made it (``HostData``): a list, a numpy array, a tensor
the plugin made while counting without naming a device (``torch.tensor``,
``as_tensor``, ``from_numpy``, ``.to`` of such a tensor to "cpu" or to a
dtype), or a pinned tensor. A device spelt ``"cpu"`` is the host; the
runner's CPU device given as a ``torch.device`` is either (on CUDA it may
be ``torch.device("cpu")``): host data copied to it counts as a copy,
device data as a read. Host tensors
vLLM made, or the plugin made before the block, are not known as host data
(unless pinned): copies from them are missed, not counted.

    python tests/e2e/host_reads.py            # every method, both paths

prints reads per engine step, reads before the first draft pass of a step,
and the places of blocking copies and synchronisations, for each plugin
method on the tiny models.
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
#: the functions that wait for the device's queue (``torch.accelerator`` is
#: missing from older torch)
SYNCHRONIZING = tuple((owner, "synchronize") for owner in
                      (torch.cuda, getattr(torch, "accelerator", None)) if owner is not None)
PLUGIN = "vllm_gammatune"


class ReadLog:
    """Events in order: ("step",), ("pass",), ("read", where), ("copy",
    where), ("sync", where)."""

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
                if event[0] == "read":
                    early.append(event[1])
        return early

    def where(self, kind: str = "read") -> collections.Counter:
        """How often each place of the plugin made a call of this kind
        ("read", "copy" or "sync"), in or between steps."""
        return collections.Counter(e[1] for e in self.events if e[0] == kind)


def _plugin_caller() -> str | None:
    frame = sys._getframe(2)
    name = frame.f_globals.get("__name__", "")
    if name.startswith(PLUGIN):
        return f"{name}:{frame.f_lineno}"
    return None


class HostData:
    """Which values are host data (module docstring). The plugin's host
    tensors are kept by identity, not by memory: on the CPU a device tensor
    vLLM copied from a numpy array shares that array's memory, and a view
    made under inference mode does not know its base. They are kept alive
    while counting, so that an id is not reused."""

    def __init__(self, device: torch.device):
        self.device = device
        self._tensors: dict[int, torch.Tensor] = {}

    def add(self, tensor: torch.Tensor) -> None:
        self._tensors[id(tensor)] = tensor

    def holds(self, value) -> bool:
        if not isinstance(value, torch.Tensor):
            return True  # a list, a numpy array, a number
        if value.device.type != "cpu":
            return False
        return (self.device.type != "cpu" or id(value) in self._tensors
                or value.is_pinned())

    def destination(self, target) -> str | None:
        """Where a copy to ``target`` (a device, its name, or a tensor on
        it) goes: "host", "device", "either" (the runner's CPU device) or
        None (no device named)."""
        if target is None:
            return None
        if isinstance(target, torch.Tensor):
            return "host" if self.holds(target) else "device"
        if isinstance(target, str) and torch.device(target).type == "cpu":
            return "host"  # spelt as the host: never the runner's device
        if torch.device(target).type != "cpu":
            return "device"
        return "either" if self.device.type == "cpu" else "host"


def _to_arguments(args, kwargs) -> tuple[object, bool]:
    """The target (device or tensor) and ``non_blocking`` of a ``Tensor.to``
    call: ``to(device, dtype, non_blocking)``, ``to(dtype, non_blocking)``
    or ``to(tensor, non_blocking)``."""
    target = kwargs.get("device")
    for arg in args:
        if isinstance(arg, str | torch.device | torch.Tensor) or (
                isinstance(arg, int) and not isinstance(arg, bool)):
            target = arg
            break
    non_blocking = kwargs.get("non_blocking",
                              next((a for a in args if isinstance(a, bool)), False))
    return target, non_blocking


@contextlib.contextmanager
def count_host_reads(runner):
    """Record the plugin's host reads, blocking copies to the device and
    device synchronisations inside ``runner`` (an in-process V1 model runner
    whose drafter is the plugin's) until the block ends."""
    log = ReadLog()
    host = HostData(runner.device)
    replaced = []  # (owner, name, original)

    def replace(owner, name, wrapper_of):
        original = getattr(owner, name)
        replaced.append((owner, name, original))
        setattr(owner, name, wrapper_of(original))

    def record(caller, source_is_host, destination, non_blocking=False):
        """A read: device data to the host; a copy: host data to the device,
        waited for. A copy within the host or the device waits for nothing."""
        if not source_is_host and destination in ("host", "either"):
            log.events.append(("read", caller))
        elif source_is_host and destination in ("device", "either") and not non_blocking:
            log.events.append(("copy", caller))

    def reading(original):
        def read(self, *args, **kwargs):
            caller = _plugin_caller()
            if caller is not None and not host.holds(self):
                log.events.append(("read", caller))
            return original(self, *args, **kwargs)
        return read

    def to(original):
        def moved(self, *args, **kwargs):
            caller = _plugin_caller()
            result = original(self, *args, **kwargs)
            if caller is None:
                return result
            target, non_blocking = _to_arguments(args, kwargs)
            destination = host.destination(target)
            source_is_host = host.holds(self)
            record(caller, source_is_host, destination, non_blocking)
            if source_is_host and destination in (None, "host"):
                host.add(result)
            elif source_is_host and result is self:
                # on the CPU the "copy" to the device is the host tensor itself;
                # another tensor (as on CUDA) keeps it from passing for host data
                result = result.detach()
            return result
        return moved

    def cuda(original):
        def moved(self, device=None, non_blocking=False, **kwargs):
            caller = _plugin_caller()
            if caller is not None:
                record(caller, host.holds(self), "device", non_blocking)
            return original(self, device, non_blocking, **kwargs)
        return moved

    def copy_(original):
        def copied(self, src, non_blocking=False):
            caller = _plugin_caller()
            if caller is not None:
                record(caller, host.holds(src),
                       "host" if host.holds(self) else "device", non_blocking)
            return original(self, src, non_blocking)
        return copied

    def made(original, device_argument=None):
        """``torch.tensor`` / ``as_tensor`` / ``from_numpy``: a copy when
        host data goes to a named device, a host tensor when none is named
        (``device_argument``: where, after the data, a device may be given)."""
        def making(data, *args, **kwargs):
            caller = _plugin_caller()
            result = original(data, *args, **kwargs)
            if caller is not None:
                target = kwargs.get("device")
                if target is None and device_argument is not None and len(args) > device_argument:
                    target = args[device_argument]
                destination = host.destination(target)
                # device data given to these stays on the device (or is
                # copied within it): only host data makes a copy or a host tensor
                if host.holds(data):
                    record(caller, True, destination)
                    if destination in (None, "host"):
                        host.add(result)
            return result
        return making

    def synchronizing(original):
        def synchronize(*args, **kwargs):
            caller = _plugin_caller()
            if caller is None:
                return original(*args, **kwargs)
            log.events.append(("sync", caller))  # and not run: the CPU has no CUDA
            return None
        return synchronize

    for name in READING_METHODS:
        replace(torch.Tensor, name, reading)
    replace(torch.Tensor, "to", to)
    replace(torch.Tensor, "cuda", cuda)
    replace(torch.Tensor, "copy_", copy_)
    replace(torch, "tensor", made)
    replace(torch, "as_tensor", lambda original: made(original, device_argument=1))
    replace(torch, "from_numpy", made)
    for owner, name in SYNCHRONIZING:
        replace(owner, name, synchronizing)

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
        for owner, name, original in reversed(replaced):
            setattr(owner, name, original)
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
              f"a step's first draft pass; by place: {dict(log.where().most_common(6))}; "
              f"blocking copies to the device: {dict(log.where('copy'))}; "
              f"synchronisations: {dict(log.where('sync'))}")


if __name__ == "__main__":
    _main()
