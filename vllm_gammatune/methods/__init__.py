"""The plugin's methods: which exist, what each takes, and one engine's settings.

Pure Python (no vLLM, no torch). Three modules, imported one way:
``parameters`` (every plugin key of ``speculative_config``: default and
validation) <- ``registry`` (every method: its parameters, cap and policy
factory) <- ``settings`` (one engine's validated ``MethodSettings``, made
from the user's ``speculative_config`` and carried to the workers).
This package's names are the public face; the modules hold the rest.
"""

from vllm_gammatune.methods.parameters import PARAMETERS, GammaTuneConfigError, Parameter
from vllm_gammatune.methods.registry import (
    DEFAULT_ADASD_NUM_SPECULATIVE_TOKENS,
    LOSSY_METHODS,
    METHODS,
    PLUGIN_METHODS,
    Method,
    is_plugin_method,
    markdown_table,
)
from vllm_gammatune.methods.settings import (
    ADDITIONAL_CONFIG_KEY,
    MethodSettings,
    plugin_section,
    settings_from_additional_config,
    split_speculative_config,
)

__all__ = [
    "ADDITIONAL_CONFIG_KEY",
    "DEFAULT_ADASD_NUM_SPECULATIVE_TOKENS",
    "LOSSY_METHODS",
    "METHODS",
    "PARAMETERS",
    "PLUGIN_METHODS",
    "GammaTuneConfigError",
    "Method",
    "MethodSettings",
    "Parameter",
    "is_plugin_method",
    "markdown_table",
    "plugin_section",
    "settings_from_additional_config",
    "split_speculative_config",
]
