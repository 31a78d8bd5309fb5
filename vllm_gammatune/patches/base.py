"""Rebinding helper: keeps the original, refuses to patch twice.

Used by every patch module, in every process vLLM starts.

A patch module names one vLLM attribute and the plugin function that replaces
it; the replacement receives the original as its first argument, so no vLLM
code is copied and the original stays reachable (``__wrapped__``). Every
rebind is recorded in ``APPLIED``, which the tests compare with
``internals.INTERNALS``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

_MARK = "__vllm_gammatune_patch__"

#: patch_id -> (module of the owner, "Owner.name" or "name"), in the order applied
APPLIED: dict[str, tuple[str, str]] = {}


class PatchError(RuntimeError):
    """A patch target is missing or already patched."""


def is_patched(owner: Any, name: str) -> bool:
    return getattr(getattr(owner, name, None), _MARK, None) is not None


def _target(owner: Any, name: str) -> tuple[str, str]:
    if isinstance(owner, type):
        return owner.__module__, f"{owner.__qualname__}.{name}"
    return owner.__name__, name  # a module


def rebind(owner: Any, name: str, replacement: Callable[..., Any], patch_id: str) -> None:
    """Replace ``owner.name`` with ``replacement(original, *args, **kwargs)``."""
    original = getattr(owner, name, None)
    if original is None:
        raise PatchError(f"vllm-gammatune patch {patch_id}: {owner!r} has no {name!r}")
    if is_patched(owner, name):
        raise PatchError(
            f"vllm-gammatune patch {patch_id}: {getattr(owner, '__name__', owner)}.{name} "
            f"is already patched by {getattr(original, _MARK)!r}"
        )

    @functools.wraps(original)
    def patched(*args, **kwargs):
        return replacement(original, *args, **kwargs)

    setattr(patched, _MARK, patch_id)
    setattr(owner, name, patched)
    APPLIED[patch_id] = _target(owner, name)
