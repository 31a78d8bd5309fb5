"""vllm-gammatune: adaptive draft lengths for vLLM's speculative decoding.

Installing the package is all it takes: vLLM calls ``register()`` through the
``vllm.general_plugins`` entry point in every process it starts (front end,
engine core, workers, Ray actors). Then::

    LLM(model=TARGET, speculative_config={"method": "gammatune", "model": DRAFT,
                                          "num_speculative_tokens": 16})

Importing this package does not import vLLM; ``policies`` never does.
"""

from __future__ import annotations

import logging

__version__ = "0.1.0"

_registered = False


def register() -> None:
    """The vLLM general-plugin entry point. Idempotent.

    On the pinned vLLM series it applies every patch in ``patches``. On any
    other version it patches nothing, so vLLM keeps working for everything
    else, and a request for one of the plugin's methods fails at
    ``LLM(...)`` with an error naming the installed and supported versions.
    """
    global _registered
    if _registered:
        return
    from vllm_gammatune import pin

    logger = logging.getLogger("vllm.vllm_gammatune")
    if not pin.is_supported(pin.installed_vllm_version()):
        _install_version_guard()
        logger.warning(
            "vllm-gammatune %s supports vLLM %s.x only (found %s): its methods "
            "are unavailable.",
            __version__,
            pin.SUPPORTED_VLLM_SERIES,
            pin.installed_vllm_version(),
        )
        _registered = True
        return
    from vllm_gammatune.patches import apply_all

    apply_all()
    _registered = True


def _install_version_guard() -> None:
    """On an unsupported vLLM, fail clearly when a plugin method is asked for."""
    try:
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:
        return
    from vllm_gammatune.engine_config import requested_plugin_method
    from vllm_gammatune.patches.base import rebind
    from vllm_gammatune.pin import check_vllm_version

    def guard(original, engine_args, *args, **kwargs):
        if requested_plugin_method(engine_args) is not None:
            check_vllm_version()
        return original(engine_args, *args, **kwargs)

    if hasattr(EngineArgs, "create_speculative_config"):
        rebind(EngineArgs, "create_speculative_config", guard, "version_guard")
