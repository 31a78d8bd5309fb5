"""Every plugin key of ``speculative_config``: its default and its validation.

Each is a ``Parameter`` in ``PARAMETERS``; which method takes which is the
registry's (``methods.registry.METHODS``). Pure Python (no vLLM import).

Defaults. The GammaTune paper gives none. ``eta`` (from {0.3, 0.5, 0.8}) and
GammaTune+'s ``confidence_threshold`` (from {0.3, 0.4, 0.6}) were chosen by a
sweep on the real Qwen pair over the tuning half of Spec-Bench only, kept
apart from the prompts results are reported on (docs/results.md, "tuning").
``delta=2`` is Hugging Face's expansion step and ``gamma_init=4`` the middle
of the paper's sweep; neither was swept.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vllm_gammatune.policies import ADASD_MODES
from vllm_gammatune.policies.cost_aware.ablation import ABLATABLE_PARTS

DEFAULT_GAMMA_INIT = 4
DEFAULT_GAMMA_MIN = 1
DEFAULT_ETA = 0.5
DEFAULT_DELTA = 2
#: GammaTune+'s tau, chosen by the tuning sweep (module docstring).
DEFAULT_CONFIDENCE_THRESHOLD = 0.6
DEFAULT_ADASD_MODE = "both"
DEFAULT_PROBE_INTERVAL = 8
#: gammatune_cost: share of engine time that probes may lose in steps that
#: would not draft otherwise (``CostAwarePolicy``)
DEFAULT_PROBE_BUDGET = 0.01
#: gammatune_cost: the predicted gain over not drafting a step needs to draft
DEFAULT_MIN_DRAFT_GAIN = 0.05
#: gammatune_cost's fixed_step_costs: the four coefficients, in seconds
STEP_COST_KEYS = ("target_step_s", "target_token_s", "draft_pass_s", "draft_token_s")


class GammaTuneConfigError(ValueError):
    """A bad speculative_config for one of the plugin's methods."""


# -- validation ---------------------------------------------------------------
def require_int(key: str, value: Any, allowed: str, low: int, high: int | None = None) -> int:
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


def require_fraction(key: str, value: Any, allowed: str, ok: Callable[[float], bool]) -> float:
    """A number (not a bool, not NaN) for which ``ok`` holds."""
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


def require_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise GammaTuneConfigError(
            f"speculative_config[{key!r}]={value!r} is not allowed: must be true or false")
    return value


def _step_costs(value: Any, resolved: Mapping[str, Any]) -> dict[str, float] | None:
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
        costs[key] = require_fraction(
            f"fixed_step_costs.{key}", value[key], ">= 0 seconds (finite)",
            lambda v: 0.0 <= v < math.inf)
    if costs["target_step_s"] + costs["target_token_s"] <= 0.0:
        raise GammaTuneConfigError(
            "speculative_config['fixed_step_costs']: target_step_s and "
            "target_token_s cannot both be 0 (a target step takes time)")
    return costs


def _token_stop(value: Any, resolved: Mapping[str, Any]) -> bool:
    """The per-token stop reads the draft model's probability of each
    token: a drafter without one (n-gram) cannot serve it."""
    value = require_bool("token_stop", value)
    if value and not resolved["draft_distributions"]:
        raise GammaTuneConfigError(
            f"speculative_config['token_stop']=True is not allowed with drafter "
            f"{resolved['drafter']!r}: the per-token stop reads the draft model's "
            "probability of each token, which that drafter does not have; leave "
            "token_stop unset or set it to false")
    return value


def _ablate(value: Any, resolved: Mapping[str, Any]) -> list[str]:
    """gammatune_cost's parts switched off, for measurement: a list of
    names of ``ABLATABLE_PARTS``, kept sorted without repeats."""
    if (not isinstance(value, list | tuple)
            or any(not isinstance(v, str) or v not in ABLATABLE_PARTS for v in value)):
        raise GammaTuneConfigError(
            f"speculative_config['ablate']={value!r} is not allowed: must be a list of "
            f"parts of gammatune_cost to switch off for a measurement, each one of: "
            f"{', '.join(ABLATABLE_PARTS)} (empty: none, the default)")
    return sorted(set(value))


def _adasd_mode(value: Any, resolved: Mapping[str, Any]) -> str:
    if value not in ADASD_MODES:
        raise GammaTuneConfigError(
            f"speculative_config['adasd_mode']={value!r} is not allowed: "
            f"must be one of {', '.join(repr(m) for m in ADASD_MODES)} (AdaSD, "
            "Gen-Only, Verify-Only)"
        )
    return value


# -- the table ------------------------------------------------------------------
@dataclass(frozen=True)
class Parameter:
    """One plugin key of ``speculative_config``.

    ``default``: the value when the user gives none, or a function of the
    values resolved before this parameter (``num_speculative_tokens``, the
    ``drafter``, whether it offers ``draft_distributions``, and the
    parameters above it in ``PARAMETERS``). ``validate(value, resolved)``
    returns the value to keep or raises ``GammaTuneConfigError`` naming the
    key, the value and what is allowed.
    """

    name: str
    default: Any
    validate: Callable[[Any, Mapping[str, Any]], Any]
    description: str

    def default_for(self, method_defaults: Mapping[str, Any],
                    resolved: Mapping[str, Any]) -> Any:
        """The default under a method's own defaults (``Method.defaults``)."""
        default = method_defaults.get(self.name, self.default)
        return default(resolved) if callable(default) else default


#: Every plugin parameter, in the order they are resolved (a parameter's
#: default and validation may read those above it).
PARAMETERS: dict[str, Parameter] = {p.name: p for p in (
    Parameter(
        "gamma_min", DEFAULT_GAMMA_MIN,
        lambda v, r: require_int(
            "gamma_min", v, "in [1, gamma_max] where gamma_max = "
            f"num_speculative_tokens = {r['num_speculative_tokens']}",
            low=1, high=r["num_speculative_tokens"]),
        "lower clamp of GammaTune's smoothed window (eq. 8)"),
    Parameter(
        "gamma_init",
        lambda r: min(max(DEFAULT_GAMMA_INIT, r["gamma_min"]), r["num_speculative_tokens"]),
        lambda v, r: require_int(
            "gamma_init", v, f"in [gamma_min={r['gamma_min']}, "
            f"num_speculative_tokens={r['num_speculative_tokens']}]",
            low=r["gamma_min"], high=r["num_speculative_tokens"]),
        "initial draft length (the fixed one for the baselines)"),
    Parameter(
        "eta", DEFAULT_ETA,
        lambda v, r: require_fraction("eta", v, "(0, 1]", lambda x: 0.0 < x <= 1.0),
        "weight of the newest acceptance count in GammaTune's average (eq. 8)"),
    Parameter(
        "delta", DEFAULT_DELTA,
        lambda v, r: require_int("delta", v, ">= 0", low=0),
        "added to the count when every drafted token was accepted (eq. 7)"),
    Parameter(
        "confidence_threshold", DEFAULT_CONFIDENCE_THRESHOLD,
        lambda v, r: require_fraction("confidence_threshold", v, "(0, 1)",
                                      lambda x: 0.0 < x < 1.0),
        "a draft stops after a token whose top probability is below it"),
    Parameter(
        "adasd_mode", DEFAULT_ADASD_MODE, _adasd_mode,
        "AdaSD's ablation: 'both', 'generation' (Gen-Only) or 'verification' "
        "(Verify-Only)"),
    Parameter(
        "adasd_window", lambda r: r["num_speculative_tokens"],
        lambda v, r: require_int(
            "adasd_window", v,
            f"in [1, num_speculative_tokens={r['num_speculative_tokens']}] "
            "(AdaSD's window W)", low=1, high=r["num_speculative_tokens"]),
        "AdaSD's maximum window W (default: the cap)"),
    Parameter(
        "probe_interval", DEFAULT_PROBE_INTERVAL,
        lambda v, r: require_int(
            "probe_interval", v,
            ">= 1 (engine steps at draft length 0 before a request probes)", low=1),
        "engine steps at draft length 0 before a request probes with one token "
        "(a new request's first probe comes at once)"),
    Parameter(
        "probe_budget", DEFAULT_PROBE_BUDGET,
        lambda v, r: require_fraction(
            "probe_budget", v, "(0, 1] (share of engine time probes may lose; "
            "1 = no limit)", lambda x: 0.0 < x <= 1.0),
        "share of engine time probes may lose in steps that would not draft"),
    Parameter(
        "min_draft_gain", DEFAULT_MIN_DRAFT_GAIN,
        lambda v, r: require_fraction(
            "min_draft_gain", v, "[0, 1) (predicted gain over not drafting a step "
            "needs to draft)", lambda x: 0.0 <= x < 1.0),
        "predicted gain over not drafting that a step needs to draft"),
    Parameter(
        "keep_pace", True, lambda v, r: require_bool("keep_pace", v),
        "a step drafts only if every request that can draft expects at least "
        "the tokens per second it would get were the step not drafted (off: "
        "the batch's tokens per second alone decide)"),
    Parameter(
        "token_stop", lambda r: r["draft_distributions"], _token_stop,
        "after each draft token, draft the next only while it pays (off: the "
        "step plan's lengths; off by default, and refused, with a drafter "
        "without a draft distribution)"),
    Parameter(
        "ablate", lambda r: [], _ablate,
        "for measurement only: parts switched off (docs/cost-aware.md, \"What each "
        "part is worth\")"),
    Parameter(
        "fixed_step_costs", None, _step_costs,
        "fixed costs in seconds (" + ", ".join(STEP_COST_KEYS) + ") instead of "
        "measured ones, for reproducible runs"),
)}


def resolve_parameters(taken: tuple[str, ...], method_defaults: Mapping[str, Any],
                       config: Mapping[str, Any], num_speculative_tokens: int,
                       drafter: str = "draft_model",
                       draft_distributions: bool = True) -> dict[str, Any]:
    """The validated values of the parameters in ``taken`` (a method's): the
    user's value where given, else the default under ``method_defaults``.

    Every parameter is resolved in ``PARAMETERS`` order, because a default or
    a validation may read the parameters above it (``gamma_init`` reads
    ``gamma_min``); a parameter the method does not take stands at its
    default there and is not returned.

    Raises:
        GammaTuneConfigError: naming the key, the value and what is allowed.
    """
    resolved: dict[str, Any] = {"num_speculative_tokens": num_speculative_tokens,
                                "drafter": drafter,
                                "draft_distributions": draft_distributions}
    for name, parameter in PARAMETERS.items():
        default = parameter.default_for(method_defaults, resolved)
        resolved[name] = (parameter.validate(config.get(name, default), resolved)
                          if name in taken else default)
    return {name: resolved[name] for name in taken}
