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

    Where the installed vLLM passes ``pin.compatibility_problems`` (a supported
    series, and every internal of ``internals.INTERNALS`` present with the
    parameters the plugin relies on) it applies every patch in ``patches``.
    Otherwise it patches nothing, so vLLM keeps working for everything else,
    and a request for one of the plugin's methods fails at ``LLM(...)`` with
    an error naming each problem.
    """
    global _registered
    if _registered:
        return
    from vllm_gammatune.compat import pin

    problems = pin.compatibility_problems()
    if problems:
        _install_refusal(problems)
        logging.getLogger("vllm.vllm_gammatune").warning(
            "vllm-gammatune %s: its methods are unavailable on this vLLM:\n%s",
            __version__, "\n".join(problems))
        _registered = True
        return
    from vllm_gammatune.patches import apply_all

    apply_all()
    _registered = True


def _install_refusal(problems: list[str]) -> None:
    """On an incompatible vLLM, fail clearly when a plugin method is asked for."""
    try:
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:
        return
    from vllm_gammatune.integration.engine_config import requested_plugin_method
    from vllm_gammatune.patches.base import rebind
    from vllm_gammatune.compat.pin import UnsupportedVllmVersionError

    def refuse(original, engine_args, *args, **kwargs):
        method = requested_plugin_method(engine_args)
        if method is not None:
            raise UnsupportedVllmVersionError(
                f"speculative method {method!r} is unavailable:\n" + "\n".join(problems))
        return original(engine_args, *args, **kwargs)

    if hasattr(EngineArgs, "create_speculative_config"):
        rebind(EngineArgs, "create_speculative_config", refuse,
               patch_id="arg_utils.EngineArgs.create_speculative_config (refusal)")
