"""Where the time inside the plugin's entry points goes, one engine step at a time.

For an engine in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the
engine core and the worker run in the caller's thread). ``install_timers``
wraps what the plugin installs in vLLM (every patch of
``vllm_gammatune.patches``, and the drafter's overrides of vLLM's proposer),
the vLLM code each hands work to (the patched original, the ``super()``
method) and the draft model; ``torch_calls_mode`` catches every torch call
made while the plugin's own code runs. A ``Clock`` gives each instant to the
innermost of:

- ``PLUGIN``: the plugin's Python and host numpy (and vLLM helpers it calls);
- ``VLLM``: vLLM's own work the plugin wraps or extends (also the CPU-only
  sampling fix of ``FOREIGN_PATCHES``, which on CUDA defers to vLLM's kernel);
- ``FORWARD``: the draft model's forward passes and logits;
- ``OP``, ``VIEW``, ``META``: a torch call in the plugin's context that runs a
  kernel, returns a view, or reads metadata (``call_kind``).

Catching a call costs time: ``calibrate`` measures in a loop how much lands
outside the call's own interval (on the plugin) and inside it. In an engine
the handler runs cold and costs more than in the loop, so the harness measures
it there (``benchmarks.host_time.in_engine_calibration``) before its split
(``split_step``) takes it out.
"""

from __future__ import annotations

import collections
import functools
import importlib
import inspect
import sys
import time

PLUGIN, VLLM, FORWARD, OP, VIEW, META = "plugin", "vllm", "forward", "op", "view", "meta"
#: the plugin's patches that only run vLLM's work on CUDA (the CPU sampling fix)
FOREIGN_PATCHES = frozenset({"rejection_sampler.expand_batch_to_tokens"})
#: reads of a tensor's metadata: no kernel on any device
METADATA_CALLS = frozenset({"__len__", "size", "numel", "dim", "stride", "is_contiguous",
                            "element_size", "data_ptr", "storage_offset", "__hash__",
                            "is_floating_point", "__format__", "__repr__"})
#: calls that return a view: host dispatch alone, no kernel
VIEW_CALLS = frozenset({"unsqueeze", "squeeze", "view", "narrow", "select", "expand",
                        "permute", "transpose", "t", "flatten", "unflatten", "split",
                        "chunk", "unbind", "as_strided", "detach", "view_as", "expand_as"})


class Clock:
    """Exclusive time per category: the innermost category on the stack runs.
    ``now``: the thread's CPU time by default, so that a busy machine's
    descheduling is not counted."""

    def __init__(self, now=time.thread_time):
        self.now = now
        self.stack: list[str] = []
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.counts: collections.Counter = collections.Counter()
        #: (code, instruction offset, name) of each kernel op's caller -> calls,
        #: never reset by ``take`` (``op_site_lines`` reads them)
        self.op_sites: collections.Counter = collections.Counter()
        self._mark = 0.0

    def push(self, category: str) -> None:
        now = self.now()
        if self.stack:
            self.seconds[self.stack[-1]] += now - self._mark
        self.stack.append(category)
        self._mark = now

    def pop(self) -> None:
        now = self.now()
        self.seconds[self.stack.pop()] += now - self._mark
        self._mark = now

    def take(self) -> tuple[dict, dict]:
        """(seconds, counts) per category since the last ``take``."""
        taken = dict(self.seconds), dict(self.counts)
        self.seconds.clear()
        self.counts.clear()
        return taken


def timed(clock: Clock, category: str, fn, count: str | None = None):
    """``fn`` whose time goes to ``category`` (its calls counted under ``count``)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        clock.push(category)
        try:
            return fn(*args, **kwargs)
        finally:
            clock.pop()
            if count:
                clock.counts[count] += 1
    return wrapper


def call_kind(func, args) -> str:
    """``OP``, ``VIEW`` or ``META`` for a caught torch call."""
    name = getattr(func, "__name__", "")
    if name == "__get__" or name in METADATA_CALLS:  # properties: shape, device, ...
        return META
    if name == "__getitem__" and len(args) > 1:
        index = args[1] if isinstance(args[1], tuple) else (args[1],)
        basic = (int, slice, type(None), type(...))
        return VIEW if all(isinstance(i, basic) for i in index) else OP
    return VIEW if name in VIEW_CALLS else OP


def torch_calls_mode(clock: Clock):
    """A ``TorchFunctionMode`` that times and counts each torch call made
    while the plugin's own code runs (the others pass straight through)."""
    from torch.overrides import TorchFunctionMode

    class PluginTorchCalls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if not clock.stack or clock.stack[-1] != PLUGIN:
                return func(*args, **(kwargs or {}))
            kind = call_kind(func, args)
            if kind == OP:  # the first caller outside torch's own Python
                frame = sys._getframe(1)
                while "/torch/" in frame.f_code.co_filename and frame.f_back is not None:
                    frame = frame.f_back
                # the offset, not ``f_lineno``: that scans the line table (microseconds)
                clock.op_sites[frame.f_code, frame.f_lasti, getattr(func, "__name__", "?")] += 1
            clock.push(kind)
            try:
                return func(*args, **(kwargs or {}))
            finally:
                clock.pop()
                clock.counts[kind] += 1

    return PluginTorchCalls()


def op_site_lines(op_sites: collections.Counter) -> collections.Counter:
    """``Clock.op_sites`` by (file, line, name)."""
    lines = collections.Counter()
    for (code, offset, name), calls in op_sites.items():
        line = next((n for start, end, n in code.co_lines() if start <= offset < end), None)
        lines[code.co_filename, line, name] += calls
    return lines


def calibrate(clock: Clock, n: int = 3000) -> dict:
    """Seconds catching adds per torch call, ``outside`` and ``inside`` the
    call's interval: loops of a tiny torch call with and without the mode,
    and of a C builtin (the loop's own cost); the least of five rounds."""
    import torch

    x = torch.zeros(8)

    def loop(call):
        started = clock.now()
        for _ in range(n):
            call(1)
        return clock.now() - started

    rounds = []
    for _ in range(5):
        base, plain = loop(abs), loop(x.add)
        clock.take()
        with torch_calls_mode(clock):
            clock.push(PLUGIN)
            caught = loop(x.add)
            clock.pop()
        inside = clock.take()[0][OP]
        rounds.append(((caught - inside - base) / n, (inside - plain + base) / n))
    return {"outside": max(0.0, min(r[0] for r in rounds)),
            "inside": max(0.0, min(r[1] for r in rounds))}


def install_timers(clock: Clock, drafter) -> list:
    """Time the plugin's entry points, the vLLM code each hands work to, and
    ``drafter``'s model; returns the callables that undo it (in reverse)."""
    from vllm.v1.spec_decode.draft_model import DraftModelProposer
    from vllm_gammatune.drafter.proposer import AdaptiveDraftModelProposer
    from vllm_gammatune.patches.base import APPLIED

    undo = []

    def rebind(owner, name, new):
        old = vars(owner)[name]
        setattr(owner, name, new)
        undo.append(lambda: setattr(owner, name, old))

    for patch_id, (module, target) in APPLIED.items():
        owner = importlib.import_module(module)
        *path, name = target.split(".")
        for part in path:
            owner = getattr(owner, part)
        patched = vars(owner)[name]  # ``patches.base.rebind``'s closure
        cells = dict(zip(patched.__code__.co_freevars,
                         (cell.cell_contents for cell in patched.__closure__)))
        original, replacement = cells["original"], cells["replacement"]
        category = VLLM if patch_id in FOREIGN_PATCHES else PLUGIN

        def entry(*args, _r=replacement, _o=timed(clock, VLLM, original), _c=category,
                  **kwargs):
            clock.push(_c)
            try:
                return _r(_o, *args, **kwargs)
            finally:
                clock.pop()
        rebind(owner, name, functools.wraps(original)(entry))
    for name, fn in list(vars(AdaptiveDraftModelProposer).items()):
        if inspect.isfunction(fn) and not name.startswith("__") \
                and hasattr(DraftModelProposer, name):
            rebind(AdaptiveDraftModelProposer, name, timed(clock, PLUGIN, fn))
            base = next(c for c in DraftModelProposer.__mro__ if name in vars(c))
            rebind(base, name, timed(clock, VLLM, vars(base)[name]))
    model = drafter.model
    for name, count in (("forward", "passes"), ("compute_logits", None)):
        setattr(model, name, timed(clock, FORWARD, getattr(model, name), count))
        undo.append(functools.partial(vars(model).pop, name, None))
    return undo
