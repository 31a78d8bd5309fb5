"""Patch of ``vllm.engine.arg_utils`` (front-end process).

Runs where the engine's arguments become a ``VllmConfig``: the front end
(``LLM(...)``, ``vllm serve``), before any engine process starts.

What: ``EngineArgs.create_speculative_config`` ->
  ``integration.engine_config.create_speculative_config``.
Why: ``SpeculativeConfig.method`` is a closed ``Literal``; the plugin's methods
  ("gammatune", ...) and keys ("gamma_init", ...) would fail pydantic
  validation. The wrapper validates them, turns them into vLLM's
  ``draft_model`` config, puts the plugin settings into ``additional_config``
  (which reaches every worker) and turns async scheduling off.
Remove when: vLLM lets plugins register speculative methods with their own
  config keys.
"""

from vllm.engine.arg_utils import EngineArgs

from vllm_gammatune.integration.engine_config import create_speculative_config
from vllm_gammatune.patches.base import rebind


def apply() -> None:
    rebind(
        EngineArgs,
        "create_speculative_config",
        create_speculative_config,
        patch_id="arg_utils.EngineArgs.create_speculative_config",
    )
