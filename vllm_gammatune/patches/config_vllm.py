"""Patch of ``vllm.config.vllm`` (every process that reads the config).

Runs wherever vLLM asks ``VllmConfig.use_v2_model_runner``: the front end
when it validates the config, the engine core and the workers when they
choose the model runner.

What:
- ``VllmConfig._get_v2_model_runner_unsupported_features`` ->
  ``integration.runner_choice.v2_unsupported_features``.
- ``VllmConfig._validate_v2_model_runner`` ->
  ``integration.runner_choice.validate_v2_refusing_plugin_methods``.
Why: the plugin's drafter lives in vLLM's V1 model runner; on CUDA vLLM builds
  Model Runner V2 by default, where a plugin method would silently run vLLM's
  fixed-K draft model. Naming the plugin's method among V2's unsupported
  features makes vLLM itself choose V1 for that engine (and log why), as it
  does for ``custom_class``; a configuration that forces V2 is refused.
Remove when: vLLM lets a plugin register a drafter for Model Runner V2.
"""

from vllm.config.vllm import VllmConfig

from vllm_gammatune.patches.base import rebind
from vllm_gammatune.integration.runner_choice import (
    v2_unsupported_features,
    validate_v2_refusing_plugin_methods,
)


def apply() -> None:
    rebind(
        VllmConfig,
        "_get_v2_model_runner_unsupported_features",
        v2_unsupported_features,
        patch_id="config_vllm.VllmConfig._get_v2_model_runner_unsupported_features",
    )
    rebind(
        VllmConfig,
        "_validate_v2_model_runner",
        validate_v2_refusing_plugin_methods,
        patch_id="config_vllm.VllmConfig._validate_v2_model_runner",
    )
