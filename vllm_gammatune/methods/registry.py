"""The plugin's methods in one table: what each is, what it takes, what it runs.

Every plugin method is a ``Method`` in ``METHODS``: its name, a one-line
description, whether it is lossless (outputs exactly the target's) or lossy,
its default cap (``num_speculative_tokens``), the plugin parameters it
accepts (``methods.parameters.PARAMETERS``) and the factory of its
draft-length policy. The settings (``methods.settings``), the docs table
(``markdown_table``), the benchmarks and the tests read this table; nothing
else lists the methods. Pure Python (no vLLM import).

AssistantThreshold keeps Hugging Face's default threshold, 0.4; the other
parameters' defaults are explained in ``methods.parameters``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from vllm_gammatune.methods.drafters import DRAFTER_DRAFT_MODEL, DRAFTERS
from vllm_gammatune.methods.parameters import resolve_parameters
from vllm_gammatune.policies import (
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
#: AssistantThreshold keeps Hugging Face's assistant_confidence_threshold default.
DEFAULT_ASSISTANT_THRESHOLD = 0.4
#: AdaSD: the paper's maximum window W (Appendix A) is the default cap, and
#: the default window is the cap.
DEFAULT_ADASD_NUM_SPECULATIVE_TOKENS = PAPER_WINDOW
#: gammatune_cost: a smaller default cap keeps its per-step search short
#: (the search is cap x requests).
DEFAULT_COST_AWARE_NUM_SPECULATIVE_TOKENS = 8
#: On CUDA, with the draft model, every drafted step verifies the whole cap
#: for each request (the FULL-graph shape, ``drafter/uniform_shape.py``), and
#: vLLM captures FULL graphs at multiples of 1 + cap: a short default cap
#: (``docs/cuda.md``, "Defaults on CUDA"). AdaSD keeps its window.
DEFAULT_CUDA_NUM_SPECULATIVE_TOKENS = 4


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
    #: ``build_policy(num_speculative_tokens, **parameters)``: its draft-length
    #: policy, from validated values of exactly ``parameters``
    build_policy: Callable[..., DraftLengthPolicy]
    #: its default cap when ``num_speculative_tokens`` is not given
    num_speculative_tokens: int = DEFAULT_NUM_SPECULATIVE_TOKENS
    #: its default cap on CUDA with the draft model (None: the same)
    cuda_num_speculative_tokens: int | None = DEFAULT_CUDA_NUM_SPECULATIVE_TOKENS
    #: its own defaults, where they differ from the parameter's
    defaults: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: it stops each draft on the draft model's distribution (confidence,
    #: entropy), so only a drafter that has one can serve it
    #: (``methods.drafters``)
    needs_distributions: bool = False
    #: it chooses per request between a free draft (an n-gram's) and the
    #: draft model's, from measured costs (``policies.cost_aware.free_drafts``)
    plans_free_drafts: bool = False

    def default_cap(self, cuda_draft_model: bool = False) -> int:
        """Its cap when ``num_speculative_tokens`` is not given;
        ``cuda_draft_model``: the engine drafts with the draft model on CUDA."""
        if cuda_draft_model and self.cuda_num_speculative_tokens is not None:
            return self.cuda_num_speculative_tokens
        return self.num_speculative_tokens

    def resolve(self, config: Mapping[str, Any], num_speculative_tokens: int,
                drafter: str = DRAFTER_DRAFT_MODEL) -> dict[str, Any]:
        """Its parameters' validated values: the user's (``config``) where
        given, else the defaults at this cap and drafter. Raises
        ``GammaTuneConfigError``."""
        return resolve_parameters(self.parameters, self.defaults, config,
                                  num_speculative_tokens, drafter,
                                  DRAFTERS[drafter].offers_distributions)


def _gammatune_policy(num_speculative_tokens: int, *, gamma_init: int, gamma_min: int,
                      eta: float, delta: int,
                      confidence_threshold: float | None = None) -> DraftLengthPolicy:
    return GammaTunePolicy(num_speculative_tokens, gamma_init=gamma_init,
                           gamma_min=gamma_min, eta=eta, delta=delta,
                           confidence_threshold=confidence_threshold)


def _cost_aware_policy(num_speculative_tokens: int, *, probe_interval: int,
                       probe_budget: float, min_draft_gain: float, keep_pace: bool,
                       token_stop: bool, ablate: list[str],
                       fixed_step_costs: dict[str, float] | None) -> DraftLengthPolicy:
    costs = fixed_step_costs
    return CostAwarePolicy(
        num_speculative_tokens,
        probe_interval=probe_interval,
        probe_budget=probe_budget,
        min_draft_gain=min_draft_gain,
        keep_pace=keep_pace,
        token_stop=token_stop,
        target_cost=None if costs is None else FixedLinearCost(
            costs["target_step_s"], costs["target_token_s"]),
        draft_cost=None if costs is None else FixedLinearCost(
            costs["draft_pass_s"], costs["draft_token_s"]),
        ablate=ablate,
    )


_GAMMATUNE_KEYS = ("gamma_init", "gamma_min", "eta", "delta")

#: name -> method, in the order error messages and tables list them.
METHODS: dict[str, Method] = {m.name: m for m in (
    Method(METHOD_GAMMATUNE,
           "GammaTune: per-request draft length from a smoothed count of accepted tokens",
           True, _GAMMATUNE_KEYS, _gammatune_policy),
    Method(METHOD_GAMMATUNE_PLUS,
           "GammaTune+: GammaTune with a stop at the first low-confidence draft token",
           True, _GAMMATUNE_KEYS + ("confidence_threshold",), _gammatune_policy,
           needs_distributions=True),
    Method(METHOD_FIXED, "a fixed draft length (vLLM's K, on the plugin's machinery)",
           True, ("gamma_init",),
           lambda cap, gamma_init: FixedDraftPolicy(cap, gamma_init)),
    Method(METHOD_HF_HEURISTIC,
           "Hugging Face's heuristic: K + 2 after a fully accepted draft, else K - 1",
           True, ("gamma_init",),
           lambda cap, gamma_init: HFHeuristicPolicy(cap, gamma_init)),
    Method(METHOD_ASSISTANT_THRESHOLD,
           "a fixed draft length with Hugging Face's confidence stop",
           True, ("gamma_init", "confidence_threshold"),
           lambda cap, gamma_init, confidence_threshold: AssistantThresholdPolicy(
               cap, gamma_init, confidence_threshold),
           defaults=MappingProxyType({"confidence_threshold": DEFAULT_ASSISTANT_THRESHOLD}),
           needs_distributions=True),
    Method(METHOD_ADASD,
           "AdaSD (lossy): entropy stop while drafting, relaxed acceptance by JS distance",
           False, ("adasd_mode", "adasd_window"),
           lambda cap, adasd_mode, adasd_window: AdaSDPolicy(
               cap, window=adasd_window, mode=adasd_mode),
           num_speculative_tokens=DEFAULT_ADASD_NUM_SPECULATIVE_TOKENS,
           cuda_num_speculative_tokens=None, needs_distributions=True),
    Method(METHOD_COST_AWARE,
           "cost-aware: which requests draft (0 allowed), from measured step costs; "
           "each draft goes on token by token while its next token pays",
           True, ("probe_interval", "probe_budget", "min_draft_gain", "keep_pace",
                  "token_stop", "ablate", "fixed_step_costs"),
           _cost_aware_policy,
           num_speculative_tokens=DEFAULT_COST_AWARE_NUM_SPECULATIVE_TOKENS,
           plans_free_drafts=True),
)}

#: The plugin's method names, in table order.
PLUGIN_METHODS: tuple[str, ...] = tuple(METHODS)
#: Methods whose outputs may differ from the target's.
LOSSY_METHODS: tuple[str, ...] = tuple(m.name for m in METHODS.values() if not m.lossless)
#: Every plugin parameter a method accepts.
ALL_PLUGIN_KEYS = frozenset(k for m in METHODS.values() for k in m.parameters)


def is_plugin_method(method: object) -> bool:
    return isinstance(method, str) and method in METHODS


def unknown_method_message(method: object) -> str:
    """The error for a ``method`` that is not one of the plugin's."""
    return (
        f"speculative_config['method']={method!r} is not a vllm-gammatune method; "
        f"allowed: {', '.join(PLUGIN_METHODS)}"
    )


def methods_taking(key: str) -> list[str]:
    """The methods that accept plugin parameter ``key``, in table order."""
    return [m.name for m in METHODS.values() if key in m.parameters]


def markdown_table() -> str:
    """The methods as a Markdown table (for the docs): name, lossless, the
    drafters it can drive, default cap, parameters with their defaults at
    that cap (with the default drafter), description."""
    rows = ["| method | lossless | drafters | default `num_speculative_tokens` | "
            "parameters (defaults) | what it does |", "|---|---|---|---|---|---|"]
    for method in METHODS.values():
        cap = method.num_speculative_tokens
        values = method.resolve({}, cap)
        parameters = ", ".join(f"`{key}={values[key]!r}`" for key in method.parameters)
        drafters = ", ".join(
            f"`{d.name}`" for d in DRAFTERS.values()
            if (d.offers_distributions or not method.needs_distributions)
            and (method.plans_free_drafts or not d.needs_free_draft_planner))
        cuda_cap = method.default_cap(cuda_draft_model=True)
        caps = f"{cap}" if cuda_cap == cap else f"{cap} (CUDA, draft model: {cuda_cap})"
        rows.append(f"| `{method.name}` | {'yes' if method.lossless else 'no (lossy)'} | "
                    f"{drafters} | {caps} | {parameters} | {method.description} |")
    return "\n".join(rows) + "\n"
