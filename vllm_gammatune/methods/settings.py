"""A user's speculative_config for a plugin method: validated and split.

A user writes, in ``LLM(speculative_config=...)`` or
``vllm serve --speculative-config '...'``::

    {"method": "gammatune", "model": DRAFT, "num_speculative_tokens": 16,
     "gamma_init": 4, "gamma_min": 1, "eta": 0.5, "delta": 2}

``split_speculative_config`` takes such a dict apart: the plugin's own keys
become a ``GammaTuneSettings`` (which travels to every worker inside
``VllmConfig.additional_config[ADDITIONAL_CONFIG_KEY]``); the rest becomes the
dict of vLLM's built-in ``draft_model`` method, whose draft-model machinery
(paged KV cache, scheduler, rejection sampler) the plugin drives.

The methods, their parameters, defaults and validation are the registry's
(``vllm_gammatune.methods.registry``); the names below re-export it for the modules
that read them from here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vllm_gammatune.methods.registry import (  # noqa: F401 (re-exported)
    ALL_PLUGIN_KEYS,
    DEFAULT_ADASD_MODE,
    DEFAULT_ADASD_NUM_SPECULATIVE_TOKENS,
    DEFAULT_ASSISTANT_THRESHOLD,
    DEFAULT_CONFIDENCE_THRESHOLD,
    DEFAULT_COST_AWARE_NUM_SPECULATIVE_TOKENS,
    DEFAULT_DELTA,
    DEFAULT_ETA,
    DEFAULT_GAMMA_INIT,
    DEFAULT_GAMMA_MIN,
    DEFAULT_MIN_DRAFT_GAIN,
    DEFAULT_NUM_SPECULATIVE_TOKENS,
    DEFAULT_PROBE_BUDGET,
    DEFAULT_PROBE_INTERVAL,
    LOSSY_METHODS,
    METHOD_ADASD,
    METHOD_ASSISTANT_THRESHOLD,
    METHOD_COST_AWARE,
    METHOD_FIXED,
    METHOD_GAMMATUNE,
    METHOD_GAMMATUNE_PLUS,
    METHOD_HF_HEURISTIC,
    METHODS,
    PLUGIN_METHODS,
    STEP_COST_KEYS,
    GammaTuneConfigError,
    is_plugin_method,
    methods_taking,
    require_int,
    resolve_parameters,
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
class GammaTuneSettings:
    """The plugin's validated parameters for one engine."""

    method: str
    num_speculative_tokens: int
    gamma_init: int
    gamma_min: int = DEFAULT_GAMMA_MIN
    eta: float = DEFAULT_ETA
    delta: int = DEFAULT_DELTA
    confidence_threshold: float | None = None
    #: AdaSD only: "both" | "generation" | "verification"
    adasd_mode: str | None = None
    #: AdaSD only: the maximum window W, in [1, num_speculative_tokens]
    adasd_window: int | None = None
    #: gammatune_cost only: steps at length 0 before a request probes
    probe_interval: int | None = None
    #: gammatune_cost only: share of engine time probes may lose
    probe_budget: float | None = None
    #: gammatune_cost only: predicted gain over not drafting a step needs to draft
    min_draft_gain: float | None = None
    #: gammatune_cost only: the per-token stop on (draft each token while it pays)
    token_stop: bool | None = None
    #: gammatune_cost only: fixed costs (STEP_COST_KEYS) instead of measured ones
    fixed_step_costs: dict[str, float] | None = None

    @property
    def is_lossy(self) -> bool:
        return self.method in LOSSY_METHODS

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GammaTuneSettings:
        return cls(**data)

    def make_policy(self) -> DraftLengthPolicy:
        if self.method not in METHODS:
            raise GammaTuneConfigError(_unknown_method_message(self.method))
        return METHODS[self.method].make_policy(self)


def _unknown_method_message(method: object) -> str:
    return (
        f"speculative_config['method']={method!r} is not a vllm-gammatune method; "
        f"allowed: {', '.join(PLUGIN_METHODS)}"
    )


def split_speculative_config(
    speculative_config: dict[str, Any], vllm_keys: frozenset[str] | set[str]
) -> tuple[GammaTuneSettings, dict[str, Any]]:
    """Validate a plugin method's config; return (settings, draft_model config).

    Args:
        speculative_config: the user's dict (not modified).
        vllm_keys: the keys vLLM's ``SpeculativeConfig`` accepts.

    Raises:
        GammaTuneConfigError: naming the field, the value and what is allowed.
    """
    config = {k.replace("-", "_"): v for k, v in speculative_config.items()}
    method = config.get("method")
    if not is_plugin_method(method):
        raise GammaTuneConfigError(_unknown_method_message(method))
    allowed_plugin_keys = METHODS[method].parameters

    for key, value in config.items():
        if key in allowed_plugin_keys or key == "method":
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

    if not config.get("model"):
        raise GammaTuneConfigError(
            f"speculative_config['model'] is missing: method {method!r} needs a "
            "draft model that shares the target's vocabulary (a path or name)"
        )

    cap = require_int(
        "num_speculative_tokens",
        config.get("num_speculative_tokens", METHODS[method].num_speculative_tokens),
        ">= 1 (the cap on every draft, gamma_max)",
        low=1,
    )
    settings = GammaTuneSettings(
        method=method, num_speculative_tokens=cap,
        **resolve_parameters(METHODS[method], config, cap))
    draft_model_config = {
        k: v for k, v in config.items() if k not in ALL_PLUGIN_KEYS
    }
    draft_model_config["method"] = "draft_model"
    draft_model_config["num_speculative_tokens"] = cap
    return settings, draft_model_config


def plugin_section(additional_config: dict[str, Any] | None) -> dict[str, Any]:
    """The plugin's part of ``VllmConfig.additional_config`` ({} if unused).

    Layout: ``{"settings": GammaTuneSettings.to_dict(), "metrics_path": str}``.
    """
    if not additional_config:
        return {}
    return additional_config.get(ADDITIONAL_CONFIG_KEY) or {}


def settings_from_additional_config(
    additional_config: dict[str, Any] | None,
) -> GammaTuneSettings | None:
    """The settings a worker finds in its VllmConfig, or None (plugin unused)."""
    data = plugin_section(additional_config).get("settings")
    return None if data is None else GammaTuneSettings.from_dict(data)
