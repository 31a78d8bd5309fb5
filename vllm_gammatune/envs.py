"""Every environment variable the plugin reads, in one module (as vLLM's
``vllm/envs.py`` holds vLLM's).

Each variable has its name here (``CACHE``, ``ALLOW_UNTESTED_VLLM``,
``CUDA_HOT_PATH``, ``TRACE``) and one reader. The modules that use a
variable call its reader and never read ``os.environ`` for it themselves,
so the name, the allowed values and the error for a bad value live here
only. Readers read the environment when called, not at import, so a value
set after the package was imported counts (tests set the variables with
``monkeypatch``). A value outside the allowed
ones raises ``ValueError`` naming the variable, the value and what is
allowed. An empty value counts as unset.

Pure standard library: importable without vLLM or torch, by every room of
the package. The users' table of these variables is in ``docs/README.md``
("Environment variables").
"""

from __future__ import annotations

import os

#: Directory of the plugin's cache: the marker of a passed check of the
#: installed vLLM's internals (``compat.internals.check_vllm``). Any path;
#: unset: ``~/.cache/vllm_gammatune``.
CACHE = "VLLM_GAMMATUNE_CACHE"

#: ``1``: run on a vLLM series outside ``compat.pin.SUPPORTED_VLLM_SERIES``,
#: at the user's own risk (the check of vLLM's internals still applies).
#: ``0`` or unset: such a series is refused.
ALLOW_UNTESTED_VLLM = "VLLM_GAMMATUNE_ALLOW_UNTESTED_VLLM"

#: Which drafting path the drafter takes (``drafter.hot_path``): ``1`` the
#: CUDA hot path on any device (tests and benchmarks run it on the CPU),
#: ``0`` the host path; unset: the hot path on CUDA devices only.
CUDA_HOT_PATH = "VLLM_GAMMATUNE_CUDA_HOT_PATH"

#: A file path: append one JSON line per verified draft and per engine step's
#: decision to it (``telemetry.trace``). Unset: no trace.
TRACE = "VLLM_GAMMATUNE_TRACE"

#: Every variable above, for listing (``vllm-gammatune doctor``).
ALL = (CACHE, ALLOW_UNTESTED_VLLM, CUDA_HOT_PATH, TRACE)

_DEFAULT_CACHE = os.path.join("~", ".cache", "vllm_gammatune")


def _value(name: str) -> str:
    return os.environ.get(name, "")


def cache_dir() -> str:
    """``$VLLM_GAMMATUNE_CACHE``, or ``~/.cache/vllm_gammatune`` (expanded)."""
    return _value(CACHE) or os.path.expanduser(_DEFAULT_CACHE)


def allow_untested_vllm() -> bool:
    """Whether ``VLLM_GAMMATUNE_ALLOW_UNTESTED_VLLM`` lifts the series check.

    Raises:
        ValueError: the variable holds anything but 0 or 1.
    """
    value = _value(ALLOW_UNTESTED_VLLM)
    if value not in ("", "0", "1"):
        raise ValueError(f"{ALLOW_UNTESTED_VLLM}={value!r} is not allowed: must be 1 (try "
                         "an untested vLLM series at your own risk) or 0, or unset (only "
                         "the supported series)")
    return value == "1"


def cuda_hot_path() -> bool | None:
    """``VLLM_GAMMATUNE_CUDA_HOT_PATH``: True (forced on), False (forced
    off) or None (unset: the device decides).

    Raises:
        ValueError: the variable holds anything but 0 or 1.
    """
    value = _value(CUDA_HOT_PATH)
    if value == "":
        return None
    if value not in ("0", "1"):
        raise ValueError(f"{CUDA_HOT_PATH}={value!r} is not allowed: must be 1 (the CUDA hot "
                         "path on any device) or 0 (the host path), or unset (the hot "
                         "path on CUDA devices)")
    return value == "1"


def trace_path() -> str | None:
    """``$VLLM_GAMMATUNE_TRACE``, the trace file, or None when unset."""
    return _value(TRACE) or None


def settings() -> dict[str, str | None]:
    """Every variable's raw value in this environment (None: unset)."""
    return {name: os.environ.get(name) for name in ALL}
