"""No code of the plugin makes the host wait for the device, read from the
source (``ast``; nothing is imported or run).

On CUDA, ``torch.cuda.synchronize()``, ``Event.synchronize()``,
``Stream.synchronize()`` and ``torch.cuda.current_stream().synchronize()``
stop the host until the device has run everything queued, and the next
kernels launch late (``drafter/hot_path.py``). A test on the CPU never
runs these lines (they are guarded by the device's type, or raise there),
so the source is read instead: every call of an attribute named
``synchronize`` (whatever it is called on), of ``device_synchronize``, of a
``synchronize`` imported from torch (by whatever alias), and every
``.wait()`` on something named like an event or a stream is reported as
file:line. The waits are reported although ``torch.cuda.Event.wait`` makes
a stream, not the host, wait: from its receiver's name alone a CUDA event
cannot be told from one that blocks the host, and the hot path needs
neither. ``Event.query()`` does not wait, and is allowed; so is
``Event.elapsed_time`` (on an event not yet complete it raises, it does not
wait), and so are ``Stream.wait_event`` and ``wait_stream``.

``device_syncs`` scans one source string, so the rule is tested on small
snippets as well as on the plugin.
"""

from __future__ import annotations

import ast
import pathlib
import re
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "vllm_gammatune"
MODULES = sorted(PACKAGE.rglob("*.py"))

#: called on anything (or imported and called bare), these wait for the device
SYNCHRONIZING_NAMES = frozenset({"synchronize", "device_synchronize"})
#: ``.wait()`` on a receiver whose name says it is an event or a stream;
#: a bare ``wait`` (a thread's, a condition's) is none of the device's business
EVENT_OR_STREAM = re.compile(r"event|stream", re.IGNORECASE)


def _receiver_name(node: ast.expr) -> str:
    """The name a call's receiver goes by: ``done_event`` for
    ``self.done_event``, ``current_stream`` for ``torch.cuda.current_stream()``."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Subscript):  # events[i]
        return _receiver_name(node.value)
    return ""


def device_syncs(source: str, filename: str = "<string>") -> list[str]:
    """``filename:line: call`` for every call in ``source`` that makes the
    host wait for the device (module docstring), in line order."""
    tree = ast.parse(source, filename)
    # ``from torch.cuda import synchronize as sync``: the call goes by the alias
    imported = {alias.asname or alias.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch")
                for alias in node.names if alias.name in SYNCHRONIZING_NAMES}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        waits = ((isinstance(func, ast.Attribute) and func.attr in SYNCHRONIZING_NAMES)
                 or (isinstance(func, ast.Name) and func.id in SYNCHRONIZING_NAMES | imported)
                 or (isinstance(func, ast.Attribute) and func.attr == "wait"
                     and EVENT_OR_STREAM.search(_receiver_name(func.value))))
        if waits:
            found.append((node.lineno, f"{filename}:{node.lineno}: {ast.unparse(node)}"))
    return [text for _, text in sorted(found)]


def test_the_scan_sees_the_plugin():
    assert PACKAGE / "drafter" / "hot_path.py" in MODULES and len(MODULES) > 50


def test_no_module_of_the_plugin_waits_for_the_device():
    found = [sync for path in MODULES
             for sync in device_syncs(path.read_text(), str(path.relative_to(ROOT)))]
    assert not found, ("the plugin makes the host wait for the device (time on the device "
                       "with events read by query(), or read the clock without waiting):"
                       "\n  " + "\n  ".join(found))


def _scan(snippet: str) -> list[str]:
    return device_syncs(textwrap.dedent(snippet))


def test_a_device_synchronize_is_found_with_its_line():
    assert _scan("""\
        import torch

        def clock(device):
            torch.cuda.synchronize(device)
        """) == ["<string>:4: torch.cuda.synchronize(device)"]


def test_every_way_of_waiting_is_found():
    found = _scan("""\
        import torch
        from torch.cuda import synchronize as sync

        def wait_for_the_device(done_event, events, stream):
            done_event.synchronize()
            stream.synchronize()
            torch.cuda.current_stream().synchronize()
            torch.cuda.Stream.synchronize(stream)
            torch.accelerator.synchronize()
            sync()
            done_event.wait()
            events[0].wait(stream)
            torch.cuda.current_stream().wait()
        """)
    assert [line.split(":")[1] for line in found] == [str(n) for n in range(5, 14)]


def test_code_that_does_not_wait_is_clean():
    assert _scan("""\
        import threading
        import torch

        def step(x, lock: threading.Condition, device):
            y = (x * 2).to(device, non_blocking=True)
            lock.wait()
            return y.sum()
        """) == []


def test_asking_an_event_whether_it_is_done_is_clean():
    assert _scan("""\
        import torch

        def finished(done_event: torch.cuda.Event, stream, start) -> bool:
            stream.wait_event(done_event)
            if done_event.query():
                return start.elapsed_time(done_event) > 0
            return False
        """) == []
