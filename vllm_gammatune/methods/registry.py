"""The plugin's methods in one table: what each is, what it takes, what it runs.

Every plugin method is a ``Method`` in ``METHODS``: its name, a one-line
description, whether it is lossless (outputs exactly the target's) or lossy,
its default cap (``num_speculative_tokens``), the plugin parameters it
accepts and the factory of its draft-length policy. Every parameter is a
``Parameter`` in ``PARAMETERS``, with its default and its validation. The
config (``config.split_speculative_config``), the docs table
(``markdown_table``), the benchmarks and the tests read these tables;
nothing else lists the methods. Pure Python (no vLLM import).

Defaults. The GammaTune paper gives none. ``eta`` (from {0.3, 0.5, 0.8}) and
GammaTune+'s ``confidence_threshold`` (from {0.3, 0.4, 0.6}) were chosen by a
sweep on the real Qwen pair over the tuning half of Spec-Bench only, kept
apart from the prompts results are reported on (docs/results.md, "tuning").
``delta=2`` is Hugging Face's expansion step and ``gamma_init=4`` the middle
of the paper's sweep; neither was swept. AssistantThreshold keeps Hugging
Face's default threshold, 0.4.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from vllm_gammatune.policies import (
    ADASD_MODES,
    AdaSDPolicy,
    AssistantThresholdPolicy,
    CostAwarePolicy,
    DraftLengthPolicy,
    FixedDraftPolicy,
    FixedLinearCost,
    GammaTunePolicy,
    HFHeuristicPolicy,
)
from vllm_gammatune.policies.adasd import PAPER_WINDOW

if TYPE_CHECKING:
    from vllm_gammatune.methods.settings import GammaTuneSettings

METHOD_GAMMATUNE = "gammatune"
METHOD_GAMMATUNE_PLUS = "gammatune_plus"
METHOD_FIXED = "fixed_draft"
METHOD_HF_HEURISTIC = "hf_heuristic"
METHOD_ASSISTANT_THRESHOLD = "assistant_threshold"
#: Lossy: changes what the target accepts (AdaSD paper). Never on unless asked.
METHOD_ADASD = "adasd"
#: Cost-aware lengths (0 allowed), from measured step costs (policies/cost_aware).
METHOD_COST_AWARE = "gammatune_cost"

DEFAULT_NUM_SPECULATIVE_TOKENS = 16
DEFAULT_GAMMA_INIT = 4
DEFAULT_GAMMA_MIN = 1
DEFAULT_ETA = 0.5
DEFAULT_DELTA = 2
#: GammaTune+'s tau, chosen by the tuning sweep (module docstring).
DEFAULT_CONFIDENCE_THRESHOLD = 0.6
#: AssistantThreshold keeps Hugging Face's assistant_confidence_threshold default.
DEFAULT_ASSISTANT_THRESHOLD = 0.4
#: AdaSD: the paper's maximum window W (Appendix A) is the default cap, and
#: the default window is the cap.
DEFAULT_ADASD_NUM_SPECULATIVE_TOKENS = PAPER_WINDOW
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


def _adasd_mode(value: Any, resolved: Mapping[str, Any]) -> str:
    if value not in ADASD_MODES:
        raise GammaTuneConfigError(
            f"speculative_config['adasd_mode']={value!r} is not allowed: "
            f"must be one of {', '.join(repr(m) for m in ADASD_MODES)} (AdaSD, "
            "Gen-Only, Verify-Only)"
        )
    return value


# -- the tables -----------------------------------------------------------------
@dataclass(frozen=True)
class Parameter:
    """One plugin key of ``speculative_config``.

    ``default``: the value when the user gives none, or a function of the
    values resolved before this parameter (``num_speculative_tokens`` and the
    parameters above it in ``PARAMETERS``). ``validate(value, resolved)``
    returns the value to keep or raises ``GammaTuneConfigError`` naming the
    key, the value and what is allowed. ``every_method``: the settings of
    every method carry it (at its default where the method does not take
    it); otherwise a method that does not take it has None.
    """

    name: str
    default: Any
    validate: Callable[[Any, Mapping[str, Any]], Any]
    description: str
    every_method: bool = False

    def default_for(self, method: Method, resolved: Mapping[str, Any]) -> Any:
        default = method.defaults.get(self.name, self.default)
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
        "lower clamp of GammaTune's smoothed window (eq. 8)", every_method=True),
    Parameter(
        "gamma_init",
        lambda r: min(max(DEFAULT_GAMMA_INIT, r["gamma_min"]), r["num_speculative_tokens"]),
        lambda v, r: require_int(
            "gamma_init", v, f"in [gamma_min={r['gamma_min']}, "
            f"num_speculative_tokens={r['num_speculative_tokens']}]",
            low=r["gamma_min"], high=r["num_speculative_tokens"]),
        "initial draft length (the fixed one for the baselines)", every_method=True),
    Parameter(
        "eta", DEFAULT_ETA,
        lambda v, r: require_fraction("eta", v, "(0, 1]", lambda x: 0.0 < x <= 1.0),
        "weight of the newest acceptance count in GammaTune's average (eq. 8)",
        every_method=True),
    Parameter(
        "delta", DEFAULT_DELTA,
        lambda v, r: require_int("delta", v, ">= 0", low=0),
        "added to the count when every drafted token was accepted (eq. 7)",
        every_method=True),
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
        "engine steps at draft length 0 before a request probes with one token"),
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
        "token_stop", True, lambda v, r: require_bool("token_stop", v),
        "after each draft token, draft the next only while it pays (off: the "
        "step plan's lengths)"),
    Parameter(
        "fixed_step_costs", None, _step_costs,
        "fixed costs in seconds (" + ", ".join(STEP_COST_KEYS) + ") instead of "
        "measured ones, for reproducible runs"),
)}


@dataclass(frozen=True)
class Method:
    """One plugin method (each runs as vLLM's ``draft_model`` underneath)."""

    name: str
    #: one line, for the docs table and error messages
    description: str
    #: True: outputs are exactly the target's (the draft only changes speed)
    lossless: bool
    #: the plugin parameters it accepts (keys of ``PARAMETERS``)
    parameters: tuple[str, ...]
    #: builds its draft-length policy from validated settings
    make_policy: Callable[[GammaTuneSettings], DraftLengthPolicy]
    #: its default cap when ``num_speculative_tokens`` is not given
    num_speculative_tokens: int = DEFAULT_NUM_SPECULATIVE_TOKENS
    #: its own defaults, where they differ from the parameter's
    defaults: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


def _gammatune_policy(s: GammaTuneSettings) -> DraftLengthPolicy:
    return GammaTunePolicy(s.num_speculative_tokens, gamma_init=s.gamma_init,
                           gamma_min=s.gamma_min, eta=s.eta, delta=s.delta,
                           confidence_threshold=s.confidence_threshold)


def _cost_aware_policy(s: GammaTuneSettings) -> DraftLengthPolicy:
    costs = s.fixed_step_costs
    return CostAwarePolicy(
        s.num_speculative_tokens,
        probe_interval=s.probe_interval,
        probe_budget=s.probe_budget,
        min_draft_gain=s.min_draft_gain,
        token_stop=s.token_stop,
        target_cost=None if costs is None else FixedLinearCost(
            costs["target_step_s"], costs["target_token_s"]),
        draft_cost=None if costs is None else FixedLinearCost(
            costs["draft_pass_s"], costs["draft_token_s"]),
        # given costs are for reproducible runs: no correction by the clock
        check_cycles=costs is None,
    )


_GAMMATUNE_KEYS = ("gamma_init", "gamma_min", "eta", "delta")

#: name -> method, in the order error messages and tables list them.
METHODS: dict[str, Method] = {m.name: m for m in (
    Method(METHOD_GAMMATUNE,
           "GammaTune: per-request draft length from a smoothed count of accepted tokens",
           True, _GAMMATUNE_KEYS, _gammatune_policy),
    Method(METHOD_GAMMATUNE_PLUS,
           "GammaTune+: GammaTune with a stop at the first low-confidence draft token",
           True, _GAMMATUNE_KEYS + ("confidence_threshold",), _gammatune_policy),
    Method(METHOD_FIXED, "a fixed draft length (vLLM's K, on the plugin's machinery)",
           True, ("gamma_init",),
           lambda s: FixedDraftPolicy(s.num_speculative_tokens, s.gamma_init)),
    Method(METHOD_HF_HEURISTIC,
           "Hugging Face's heuristic: K + 2 after a fully accepted draft, else K - 1",
           True, ("gamma_init",),
           lambda s: HFHeuristicPolicy(s.num_speculative_tokens, s.gamma_init)),
    Method(METHOD_ASSISTANT_THRESHOLD,
           "a fixed draft length with Hugging Face's confidence stop",
           True, ("gamma_init", "confidence_threshold"),
           lambda s: AssistantThresholdPolicy(s.num_speculative_tokens, s.gamma_init,
                                              s.confidence_threshold),
           defaults=MappingProxyType({"confidence_threshold": DEFAULT_ASSISTANT_THRESHOLD})),
    Method(METHOD_ADASD,
           "AdaSD (lossy): entropy stop while drafting, relaxed acceptance by JS distance",
           False, ("adasd_mode", "adasd_window"),
           lambda s: AdaSDPolicy(s.num_speculative_tokens, window=s.adasd_window,
                                 mode=s.adasd_mode),
           num_speculative_tokens=DEFAULT_ADASD_NUM_SPECULATIVE_TOKENS),
    Method(METHOD_COST_AWARE,
           "cost-aware: which requests draft (0 allowed), from measured step costs; "
           "each draft goes on token by token while its next token pays",
           True, ("probe_interval", "probe_budget", "min_draft_gain", "token_stop",
                  "fixed_step_costs"),
           _cost_aware_policy,
           num_speculative_tokens=DEFAULT_COST_AWARE_NUM_SPECULATIVE_TOKENS),
)}

#: The plugin's method names, in table order.
PLUGIN_METHODS: tuple[str, ...] = tuple(METHODS)
#: Methods whose outputs may differ from the target's.
LOSSY_METHODS: tuple[str, ...] = tuple(m.name for m in METHODS.values() if not m.lossless)
#: Every plugin parameter a method accepts.
ALL_PLUGIN_KEYS = frozenset(k for m in METHODS.values() for k in m.parameters)


def is_plugin_method(method: object) -> bool:
    return isinstance(method, str) and method in METHODS


def methods_taking(key: str) -> list[str]:
    """The methods that accept plugin parameter ``key``, in table order."""
    return [m.name for m in METHODS.values() if key in m.parameters]


def resolve_parameters(method: Method, config: Mapping[str, Any],
                       num_speculative_tokens: int) -> dict[str, Any]:
    """Every parameter's validated value for ``method``: the user's value
    where given, else its default; None for a parameter the method does not
    take unless every method's settings carry it (``Parameter.every_method``).

    Raises:
        GammaTuneConfigError: naming the key, the value and what is allowed.
    """
    resolved: dict[str, Any] = {"num_speculative_tokens": num_speculative_tokens}
    for name, parameter in PARAMETERS.items():
        if name in method.parameters:
            value = config.get(name, parameter.default_for(method, resolved))
        elif parameter.every_method:
            value = parameter.default_for(method, resolved)
        else:
            resolved[name] = None
            continue
        resolved[name] = parameter.validate(value, resolved)
    del resolved["num_speculative_tokens"]
    return resolved


def markdown_table() -> str:
    """The methods as a Markdown table (for the docs): name, lossless,
    default cap, parameters with their defaults at that cap, description."""
    rows = ["| method | lossless | default `num_speculative_tokens` | parameters "
            "(defaults) | what it does |", "|---|---|---|---|---|"]
    for method in METHODS.values():
        cap = method.num_speculative_tokens
        values = resolve_parameters(method, {}, cap)
        parameters = ", ".join(f"`{key}={values[key]!r}`" for key in method.parameters)
        rows.append(f"| `{method.name}` | {'yes' if method.lossless else 'no (lossy)'} | "
                    f"{cap} | {parameters} | {method.description} |")
    return "\n".join(rows) + "\n"
