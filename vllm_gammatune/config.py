"""The plugin's speculative methods, their parameters, defaults and validation.

A user writes, in ``LLM(speculative_config=...)`` or
``vllm serve --speculative-config '...'``::

    {"method": "gammatune", "model": DRAFT, "num_speculative_tokens": 16,
     "gamma_init": 4, "gamma_min": 1, "eta": 0.5, "delta": 2}

``split_speculative_config`` takes such a dict apart: the plugin's own keys
become a ``GammaTuneSettings`` (which travels to every worker inside
``VllmConfig.additional_config[ADDITIONAL_CONFIG_KEY]``); the rest becomes the
dict of vLLM's built-in ``draft_model`` method, whose draft-model machinery
(paged KV cache, scheduler, rejection sampler) the plugin drives.

Defaults. The GammaTune paper gives none; they were chosen on the real Qwen
pair by a sweep on the tuning half of Spec-Bench (odd question ids, one
question per category, 64 tokens, greedy, batch 1; ``benchmarks/results/
tuning``): ``eta`` in {0.3, 0.5, 0.8} at ``gamma_init=4``, ``delta=2`` gave
8.27 / 8.76 / 7.39 tok/s, so ``eta=0.5``; GammaTune+'s threshold in
{0.3, 0.4, 0.6} gave 7.85 / 8.05 / 8.91 tok/s, so ``confidence_threshold=0.6``.
``delta=2`` (Hugging Face's expansion step) and ``gamma_init=4`` (the middle
of the paper's sweep; the methods are insensitive to it, see README) were not
swept. AssistantThreshold keeps Hugging Face's default threshold, 0.4.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from vllm_gammatune.policies import (
    ADASD_MODES,
    AdaSDPolicy,
    AssistantThresholdPolicy,
    CostAwarePolicy,
    DraftLengthPolicy,
    FixedLinearCost,
    FixedDraftPolicy,
    GammaTunePolicy,
    HFHeuristicPolicy,
)

#: Key of the plugin's settings inside ``VllmConfig.additional_config``.
ADDITIONAL_CONFIG_KEY = "vllm_gammatune"

#: The plugin's methods; each becomes vLLM's ``draft_model`` underneath.
METHOD_GAMMATUNE = "gammatune"
METHOD_GAMMATUNE_PLUS = "gammatune_plus"
METHOD_FIXED = "fixed_draft"
METHOD_HF_HEURISTIC = "hf_heuristic"
METHOD_ASSISTANT_THRESHOLD = "assistant_threshold"
#: Lossy: changes what the target accepts (AdaSD paper). Never on unless asked.
METHOD_ADASD = "adasd"
#: Cost-aware lengths (0 allowed), from measured step costs (policies/cost_aware.py).
METHOD_COST_AWARE = "gammatune_cost"

#: method -> plugin keys it accepts (besides vLLM's own draft_model keys).
_METHOD_KEYS: dict[str, tuple[str, ...]] = {
    METHOD_GAMMATUNE: ("gamma_init", "gamma_min", "eta", "delta"),
    METHOD_GAMMATUNE_PLUS: (
        "gamma_init",
        "gamma_min",
        "eta",
        "delta",
        "confidence_threshold",
    ),
    METHOD_FIXED: ("gamma_init",),
    METHOD_HF_HEURISTIC: ("gamma_init",),
    METHOD_ASSISTANT_THRESHOLD: ("gamma_init", "confidence_threshold"),
    METHOD_ADASD: ("adasd_mode", "adasd_window"),
    METHOD_COST_AWARE: ("probe_interval", "probe_budget", "min_draft_gain", "fixed_step_costs"),
}
#: Methods whose outputs may differ from the target's.
LOSSY_METHODS = (METHOD_ADASD,)
PLUGIN_METHODS: tuple[str, ...] = tuple(_METHOD_KEYS)
_ALL_PLUGIN_KEYS = frozenset(k for keys in _METHOD_KEYS.values() for k in keys)

DEFAULT_NUM_SPECULATIVE_TOKENS = 16
DEFAULT_GAMMA_INIT = 4
DEFAULT_GAMMA_MIN = 1
DEFAULT_ETA = 0.5
DEFAULT_DELTA = 2
#: GammaTune+'s tau, chosen by the tuning sweep (README, "Defaults").
DEFAULT_CONFIDENCE_THRESHOLD = 0.6
#: AssistantThreshold keeps Hugging Face's assistant_confidence_threshold default.
DEFAULT_ASSISTANT_THRESHOLD = 0.4
#: AdaSD: the paper's maximum window W (Appendix A) is the default cap.
DEFAULT_ADASD_NUM_SPECULATIVE_TOKENS = 20
DEFAULT_ADASD_MODE = "both"
#: gammatune_cost: a smaller default cap keeps its per-step search short
#: (0.3 ms for 16 requests at cap 8; the search is cap x requests).
DEFAULT_COST_AWARE_NUM_SPECULATIVE_TOKENS = 8
DEFAULT_PROBE_INTERVAL = 8
#: gammatune_cost: share of engine time that probes may lose in steps that
#: would not draft otherwise (``CostAwarePolicy``)
DEFAULT_PROBE_BUDGET = 0.01
#: gammatune_cost: the predicted gain over not drafting a step needs to draft
DEFAULT_MIN_DRAFT_GAIN = 0.05
#: gammatune_cost's fixed_step_costs: the four coefficients, in seconds
STEP_COST_KEYS = ("target_step_s", "target_token_s", "draft_pass_s", "draft_token_s")

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


class GammaTuneConfigError(ValueError):
    """A bad speculative_config for one of the plugin's methods."""


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
        cap = self.num_speculative_tokens
        if self.method in (METHOD_GAMMATUNE, METHOD_GAMMATUNE_PLUS):
            return GammaTunePolicy(
                cap,
                gamma_init=self.gamma_init,
                gamma_min=self.gamma_min,
                eta=self.eta,
                delta=self.delta,
                confidence_threshold=self.confidence_threshold,
            )
        if self.method == METHOD_FIXED:
            return FixedDraftPolicy(cap, self.gamma_init)
        if self.method == METHOD_HF_HEURISTIC:
            return HFHeuristicPolicy(cap, self.gamma_init)
        if self.method == METHOD_ADASD:
            assert self.adasd_mode is not None and self.adasd_window is not None
            return AdaSDPolicy(cap, window=self.adasd_window, mode=self.adasd_mode)
        if self.method == METHOD_COST_AWARE:
            assert None not in (self.probe_interval, self.probe_budget, self.min_draft_gain)
            costs = self.fixed_step_costs
            return CostAwarePolicy(
                cap,
                probe_interval=self.probe_interval,
                probe_budget=self.probe_budget,
                min_draft_gain=self.min_draft_gain,
                target_cost=None if costs is None else FixedLinearCost(
                    costs["target_step_s"], costs["target_token_s"]),
                draft_cost=None if costs is None else FixedLinearCost(
                    costs["draft_pass_s"], costs["draft_token_s"]),
                # given costs are for reproducible runs: no correction by the clock
                check_cycles=costs is None,
            )
        if self.method == METHOD_ASSISTANT_THRESHOLD:
            assert self.confidence_threshold is not None
            return AssistantThresholdPolicy(
                cap, self.gamma_init, self.confidence_threshold
            )
        raise GammaTuneConfigError(_unknown_method_message(self.method))


def is_plugin_method(method: object) -> bool:
    return isinstance(method, str) and method in _METHOD_KEYS


def _unknown_method_message(method: object) -> str:
    return (
        f"speculative_config['method']={method!r} is not a vllm-gammatune method; "
        f"allowed: {', '.join(PLUGIN_METHODS)}"
    )


def _require_int(
    key: str, value: Any, allowed: str, low: int, high: int | None = None
) -> int:
    """An integer in [low, high] (no upper bound when high is None)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        raise GammaTuneConfigError(
            f"speculative_config[{key!r}]={value!r} is not allowed: "
            f"must be an integer {allowed}"
        )
    return value


def _require_fraction(key: str, value: Any, allowed: str, ok) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise GammaTuneConfigError(
            f"speculative_config[{key!r}]={value!r} is not allowed: "
            f"must be a number in {allowed}"
        )
    value = float(value)
    if math.isnan(value) or not ok(value):
        raise GammaTuneConfigError(
            f"speculative_config[{key!r}]={value!r} is not allowed: "
            f"must be in {allowed}"
        )
    return value


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
    allowed_plugin_keys = _METHOD_KEYS[method]

    for key, value in config.items():
        if key in allowed_plugin_keys or key == "method":
            continue
        if key in _ALL_PLUGIN_KEYS:
            users = [m for m, keys in _METHOD_KEYS.items() if key in keys]
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

    default_cap = {
        METHOD_ADASD: DEFAULT_ADASD_NUM_SPECULATIVE_TOKENS,
        METHOD_COST_AWARE: DEFAULT_COST_AWARE_NUM_SPECULATIVE_TOKENS,
    }.get(method, DEFAULT_NUM_SPECULATIVE_TOKENS)
    cap = _require_int(
        "num_speculative_tokens",
        config.get("num_speculative_tokens", default_cap),
        ">= 1 (the cap on every draft, gamma_max)",
        low=1,
    )
    gamma_min = _require_int(
        "gamma_min",
        config.get("gamma_min", DEFAULT_GAMMA_MIN),
        f"in [1, gamma_max] where gamma_max = num_speculative_tokens = {cap}",
        low=1,
        high=cap,
    )
    gamma_init = _require_int(
        "gamma_init",
        config.get("gamma_init", min(max(DEFAULT_GAMMA_INIT, gamma_min), cap)),
        f"in [gamma_min={gamma_min}, num_speculative_tokens={cap}]",
        low=gamma_min,
        high=cap,
    )
    eta = _require_fraction(
        "eta", config.get("eta", DEFAULT_ETA), "(0, 1]", lambda v: 0.0 < v <= 1.0
    )
    delta = _require_int("delta", config.get("delta", DEFAULT_DELTA), ">= 0", low=0)
    threshold = None
    if "confidence_threshold" in allowed_plugin_keys:
        default_threshold = (
            DEFAULT_ASSISTANT_THRESHOLD
            if method == METHOD_ASSISTANT_THRESHOLD
            else DEFAULT_CONFIDENCE_THRESHOLD
        )
        threshold = _require_fraction(
            "confidence_threshold",
            config.get("confidence_threshold", default_threshold),
            "(0, 1)",
            lambda v: 0.0 < v < 1.0,
        )

    adasd_mode = adasd_window = None
    if method == METHOD_ADASD:
        adasd_mode = config.get("adasd_mode", DEFAULT_ADASD_MODE)
        if adasd_mode not in ADASD_MODES:
            raise GammaTuneConfigError(
                f"speculative_config['adasd_mode']={adasd_mode!r} is not allowed: "
                f"must be one of {', '.join(repr(m) for m in ADASD_MODES)} (AdaSD, "
                "Gen-Only, Verify-Only)"
            )
        adasd_window = _require_int(
            "adasd_window",
            config.get("adasd_window", cap),
            f"in [1, num_speculative_tokens={cap}] (AdaSD's window W)",
            low=1,
            high=cap,
        )

    probe_interval = probe_budget = min_draft_gain = fixed_step_costs = None
    if method == METHOD_COST_AWARE:
        probe_interval = _require_int(
            "probe_interval",
            config.get("probe_interval", DEFAULT_PROBE_INTERVAL),
            ">= 1 (engine steps at draft length 0 before a request probes)",
            low=1,
        )
        probe_budget = _require_fraction(
            "probe_budget",
            config.get("probe_budget", DEFAULT_PROBE_BUDGET),
            "(0, 1] (share of engine time probes may lose; 1 = no limit)",
            lambda v: 0.0 < v <= 1.0,
        )
        min_draft_gain = _require_fraction(
            "min_draft_gain",
            config.get("min_draft_gain", DEFAULT_MIN_DRAFT_GAIN),
            "[0, 1) (predicted gain over not drafting a step needs to draft)",
            lambda v: 0.0 <= v < 1.0,
        )
        fixed_step_costs = _step_costs(config.get("fixed_step_costs"))

    settings = GammaTuneSettings(
        method=method,
        num_speculative_tokens=cap,
        gamma_init=gamma_init,
        gamma_min=gamma_min,
        eta=eta,
        delta=delta,
        confidence_threshold=threshold,
        adasd_mode=adasd_mode,
        adasd_window=adasd_window,
        probe_interval=probe_interval,
        probe_budget=probe_budget,
        min_draft_gain=min_draft_gain,
        fixed_step_costs=fixed_step_costs,
    )
    draft_model_config = {
        k: v for k, v in config.items() if k not in _ALL_PLUGIN_KEYS
    }
    draft_model_config["method"] = "draft_model"
    draft_model_config["num_speculative_tokens"] = cap
    return settings, draft_model_config


def _step_costs(value: Any) -> dict[str, float] | None:
    """gammatune_cost's optional fixed costs: all four keys, seconds >= 0."""
    if value is None:
        return None
    allowed = f"a dict with exactly the keys {', '.join(STEP_COST_KEYS)} (seconds >= 0)"
    if not isinstance(value, dict) or set(value) != set(STEP_COST_KEYS):
        raise GammaTuneConfigError(
            f"speculative_config['fixed_step_costs']={value!r} is not allowed: "
            f"must be {allowed}")
    costs = {}
    for key in STEP_COST_KEYS:
        costs[key] = _require_fraction(
            f"fixed_step_costs.{key}", value[key], ">= 0 seconds (finite)",
            lambda v: 0.0 <= v < math.inf)
    if costs["target_step_s"] + costs["target_token_s"] <= 0.0:
        raise GammaTuneConfigError(
            "speculative_config['fixed_step_costs']: target_step_s and "
            "target_token_s cannot both be 0 (a target step takes time)")
    return costs


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
