"""One engine's settings for a plugin method, made from the user's speculative_config.

A user writes, in ``LLM(speculative_config=...)`` or
``vllm serve --speculative-config '...'``::

    {"method": "gammatune", "model": DRAFT, "num_speculative_tokens": 16,
     "gamma_init": 4, "gamma_min": 1, "eta": 0.5, "delta": 2}

``split_speculative_config`` takes such a dict apart: the plugin's own keys
become a ``MethodSettings`` (the method, the cap, the drafter and that
method's own parameters, validated), which travels to every worker as a
plain dict inside ``VllmConfig.additional_config[ADDITIONAL_CONFIG_KEY]``;
the rest becomes the dict of vLLM's built-in method underneath
(``draft_model``, or ``ngram`` with ``"drafter": "ngram"``), whose machinery
(the scheduler, the rejection sampler and, for a draft model, its paged KV
cache) the plugin drives.

Which methods exist and what each takes is the registry's
(``methods.registry``); each parameter's default and validation are in
``methods.parameters``; the drafters are in ``methods.drafters``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from vllm_gammatune.methods.drafters import (
    DRAFTER_DRAFT_MODEL,
    DRAFTERS,
    drafter_of,
    drafter_options,
)
from vllm_gammatune.methods.parameters import GammaTuneConfigError, require_int
from vllm_gammatune.methods.registry import (
    ALL_PLUGIN_KEYS,
    LOSSY_METHODS,
    METHODS,
    is_plugin_method,
    methods_taking,
    unknown_method_message,
)
from vllm_gammatune.policies import DraftLengthPolicy

#: Key of the plugin's settings inside ``VllmConfig.additional_config``.
ADDITIONAL_CONFIG_KEY = "vllm_gammatune"

# vLLM keys the plugin sets itself or cannot honour.
_REFUSED_VLLM_KEYS = {
    "method": None,  # replaced by draft_model
    "use_heterogeneous_vocab": "the adaptive methods need a draft model sharing "
    "the target's vocabulary",
    "num_speculative_tokens_per_batch_size": "the adaptive methods choose each "
    "request's length themselves",
    "disable_padded_drafter_batch": "vLLM's draft model only supports the padded "
    "drafter batch",
}


@dataclass(frozen=True)
class MethodSettings:
    """One engine's validated settings: its method, the cap on every draft,
    the values of that method's own parameters (``Method.parameters``, no
    other method's) and the drafter it drives (``methods.drafters``)."""

    method: str
    num_speculative_tokens: int
    #: parameter name -> validated value (read-only)
    parameters: Mapping[str, Any]
    drafter: str = DRAFTER_DRAFT_MODEL
    #: the drafter's own keys the plugin keeps, resolved
    #: (``drafters.drafter_options``; read-only)
    drafter_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        parameters = MappingProxyType(dict(self.parameters))
        object.__setattr__(self, "parameters", parameters)
        object.__setattr__(self, "drafter_options",
                           MappingProxyType(dict(self.drafter_options)))
        if self.drafter not in DRAFTERS:
            raise ValueError(f"unknown drafter {self.drafter!r}")
        if self.method in METHODS and set(parameters) != set(METHODS[self.method].parameters):
            raise ValueError(
                f"settings of method {self.method!r} hold {sorted(parameters)}; the "
                f"method takes {sorted(METHODS[self.method].parameters)}")

    @property
    def is_lossy(self) -> bool:
        return self.method in LOSSY_METHODS

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (``additional_config`` carries it): ``method``,
        ``num_speculative_tokens``, ``drafter`` and each parameter by name."""
        return {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens,
                "drafter": self.drafter, **copy.deepcopy(dict(self.parameters)),
                **({"drafter_options": dict(self.drafter_options)}
                   if self.drafter_options else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MethodSettings:
        parameters = dict(data)
        return cls(parameters.pop("method"), parameters.pop("num_speculative_tokens"),
                   parameters, parameters.pop("drafter", DRAFTER_DRAFT_MODEL),
                   parameters.pop("drafter_options", {}))

    def make_policy(self) -> DraftLengthPolicy:
        """A new draft-length policy of this method with these values."""
        if self.method not in METHODS:
            raise GammaTuneConfigError(unknown_method_message(self.method))
        return METHODS[self.method].build_policy(self.num_speculative_tokens,
                                                 **self.parameters)


def split_speculative_config(
    speculative_config: dict[str, Any], vllm_keys: frozenset[str] | set[str],
    on_cuda: bool = False,
) -> tuple[MethodSettings, dict[str, Any]]:
    """Validate a plugin method's config; return (settings, the config of
    vLLM's method underneath: ``draft_model`` or ``ngram``).

    Args:
        speculative_config: the user's dict (not modified).
        vllm_keys: the keys vLLM's ``SpeculativeConfig`` accepts.
        on_cuda: the engine runs on CUDA (the default cap may differ:
            ``Method.default_cap``).

    Raises:
        GammaTuneConfigError: naming the field, the value and what is allowed.
    """
    config = {k.replace("-", "_"): v for k, v in speculative_config.items()}
    method = config.get("method")
    if not is_plugin_method(method):
        raise GammaTuneConfigError(unknown_method_message(method))
    allowed_plugin_keys = METHODS[method].parameters

    for key, value in config.items():
        if key in allowed_plugin_keys or key in ("method", "drafter"):
            continue
        if key in ALL_PLUGIN_KEYS:
            users = methods_taking(key)
            raise GammaTuneConfigError(
                f"speculative_config[{key!r}] is not a parameter of method "
                f"{method!r}; it belongs to: {', '.join(users)}. Parameters of "
                f"{method!r}: {', '.join(allowed_plugin_keys)}"
            )
        if key == "gamma_max":
            raise GammaTuneConfigError(
                "speculative_config['gamma_max'] is not a key: gamma_max is "
                "'num_speculative_tokens' (the cap on every draft)"
            )
        if key in _REFUSED_VLLM_KEYS and _REFUSED_VLLM_KEYS[key] is not None:
            raise GammaTuneConfigError(
                f"speculative_config[{key!r}]={value!r} is not allowed with "
                f"method {method!r}: {_REFUSED_VLLM_KEYS[key]}"
            )
        if key not in vllm_keys:
            raise GammaTuneConfigError(
                f"speculative_config[{key!r}] is not a known key for method "
                f"{method!r}; allowed: the plugin's "
                f"{', '.join(allowed_plugin_keys)} and vLLM's draft-model keys "
                f"({', '.join(sorted(k for k in vllm_keys if not k.startswith('_')))})"
            )

    drafter = drafter_of(config, method, METHODS[method].needs_distributions,
                         METHODS[method].plans_free_drafts)

    cap = require_int(
        "num_speculative_tokens",
        config.get("num_speculative_tokens", METHODS[method].default_cap(
            on_cuda and drafter.takes_model)),
        ">= 1 (the cap on every draft, gamma_max)",
        low=1,
    )
    settings = MethodSettings(method, cap,
                              METHODS[method].resolve(config, cap, drafter.name),
                              drafter.name, drafter_options(config, drafter))
    plugin_keys = {"drafter", *(() if drafter.vllm_reads_own_keys else drafter.own_keys)}
    vllm_config = {
        k: v for k, v in config.items() if k not in ALL_PLUGIN_KEYS and k not in plugin_keys
    }
    vllm_config["method"] = drafter.vllm_method
    vllm_config["num_speculative_tokens"] = cap
    return settings, vllm_config


def plugin_section(additional_config: dict[str, Any] | None) -> dict[str, Any]:
    """The plugin's part of ``VllmConfig.additional_config`` ({} if unused).

    Layout: ``{"settings": MethodSettings.to_dict(), "metrics_path": str}``.
    """
    if not additional_config:
        return {}
    return additional_config.get(ADDITIONAL_CONFIG_KEY) or {}


def settings_from_additional_config(
    additional_config: dict[str, Any] | None,
) -> MethodSettings | None:
    """The settings a worker finds in its VllmConfig, or None (plugin unused)."""
    data = plugin_section(additional_config).get("settings")
    return None if data is None else MethodSettings.from_dict(data)
