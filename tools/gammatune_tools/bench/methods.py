"""The methods the harness runs, by name, and the speculative_config of each.

The plugin's methods are the registry's (``vllm_gammatune.methods.registry``:
their names, default caps and parameters). The harness adds no speculation,
vLLM's own drafter and a few fixed variants of plugin methods; and it says
how its sweep variable ``k`` (``--k``) and ``--cap`` set each method's
draft length, which the registry does not know:

- ``length``: ``k`` is the draft length (the cap and ``gamma_init`` are ``k``);
- ``start``: ``k`` is the initial length (``gamma_init``); the method may
  grow up to ``max(k, cap)``;
- ``cap``: ``k`` is the cap; the method picks 0..k itself;
- ``window``: ``k`` is ignored; the cap is the registry's default (AdaSD's
  window W).

Entries of ``--methods`` in interleaved runs may carry engine suffixes:
``NAME#2`` is a second engine of NAME (A/A runs), ``NAME@3`` is NAME at
``k`` = 3, ``NAME+hot`` (``+host``) is NAME with the plugin's CUDA hot path
forced on (off) in that engine's processes (``ENGINE_ENVIRONMENTS``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from vllm_gammatune.methods import METHODS as REGISTRY
from vllm_gammatune.methods.drafters import DRAFTER_DRAFT_MODEL, DRAFTERS
from vllm_gammatune.policies.cost_aware.ablation import ABLATABLE_PARTS

NO_SPECULATION = "no_spec"
#: vLLM's own drafter at a fixed K (K draft forwards in every engine step)
VLLM_FIXED_K = ("vllm_draft_model",)
#: vLLM's n-gram drafter at a fixed K (every match offers up to K tokens)
VLLM_NGRAM = "vllm_ngram"
#: the n-gram bounds of every n-gram choice, vLLM's and the plugin's alike
#: (matches of 2 to 4 tokens)
NGRAM_KEYS: Mapping[str, int] = MappingProxyType({"prompt_lookup_min": 2,
                                                  "prompt_lookup_max": 4})

#: how each plugin method reads ``k`` and ``--cap`` (module docstring)
K_ROLE: Mapping[str, str] = MappingProxyType({
    "gammatune": "start",
    "gammatune_plus": "start",
    "fixed_draft": "length",
    "hf_heuristic": "start",
    "assistant_threshold": "length",
    "adasd": "window",
    "gammatune_cost": "cap",
})

#: gammatune_cost with one part switched off, to measure what it is worth
#: (``docs/cost-aware.md``, "What each part is worth"): a part's own
#: parameter where it has one, else ``ablate``
ABLATIONS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "gammatune_cost_no_token_stop": {"token_stop": False},
    "gammatune_cost_no_pace": {"keep_pace": False},
    "gammatune_cost_no_margin": {"min_draft_gain": 0.0},
    **{f"gammatune_cost_no_{part}": {"ablate": [part]} for part in ABLATABLE_PARTS},
})

#: the shape of a GPU's step costs at small batch (seconds; only their ratios
#: matter to a plan): a target step 20 ms and 0.05 ms a verified token, a draft
#: pass 4 ms and 0.01 ms a token (``benchmarks.decision_lag``'s GPU too)
GPU_STEP_COSTS: Mapping[str, float] = MappingProxyType({
    "target_step_s": 0.020, "target_token_s": 0.00005,
    "draft_pass_s": 0.004, "draft_token_s": 0.00001})

#: harness name -> (plugin method, parameters it fixes)
VARIANTS: Mapping[str, tuple[str, Mapping[str, Any]]] = MappingProxyType({
    # Diagnostic, not a method to use: gammatune_cost that never drafts after
    # its warm-up (a plan must double the predicted throughput, and probes
    # get no budget), so a run against no_spec measures the skip path alone.
    "gammatune_cost_never": ("gammatune_cost", {"min_draft_gain": 0.999, "probe_budget": 1e-9}),
    # Diagnostic: gammatune_cost deciding from a GPU's costs, not the CPU's
    # clock, so that a run on the CPU counts the decisions a GPU user gets
    # (its times are the CPU's, not a GPU's).
    "gammatune_cost_gpu_costs": ("gammatune_cost",
                                 {"fixed_step_costs": dict(GPU_STEP_COSTS)}),
    # gammatune_cost with one part switched off (ABLATIONS)
    **{name: ("gammatune_cost", parameters) for name, parameters in ABLATIONS.items()},
    # AdaSD's ablations (Gen-Only, Verify-Only)
    "adasd_gen": ("adasd", {"adasd_mode": "generation"}),
    "adasd_verify": ("adasd", {"adasd_mode": "verification"}),
    # the n-gram drafter (methods.drafters), driven by the plugin's methods
    "gammatune_ngram": ("gammatune", {"drafter": "ngram", **NGRAM_KEYS}),
    "gammatune_cost_ngram": ("gammatune_cost", {"drafter": "ngram", **NGRAM_KEYS}),
    # the lookup ahead of the draft model
    "gammatune_cost_ngram_model": ("gammatune_cost",
                                   {"drafter": "ngram+draft_model", **NGRAM_KEYS}),
})

#: every name the harness runs: no speculation, vLLM's drafter, the registry's
#: methods in its order, each followed by its variants
METHOD_NAMES: tuple[str, ...] = (
    NO_SPECULATION, *VLLM_FIXED_K, "vllm_schedule", VLLM_NGRAM,
    *(name for method in REGISTRY
      for name in (method, *(v for v, (base, _) in VARIANTS.items() if base == method))),
)


def plugin_config(method: str, draft: str, k: int, cap: int) -> dict[str, Any]:
    """A plugin method's speculative_config for the harness's ``k`` and ``cap``."""
    role = K_ROLE[method]
    config: dict[str, Any] = {"method": method, "model": draft}
    if role == "length":
        config["num_speculative_tokens"] = k
    elif role == "start":
        config["num_speculative_tokens"] = max(k, cap)
    elif role == "cap":
        config["num_speculative_tokens"] = max(k, 1)
    else:
        config["num_speculative_tokens"] = REGISTRY[method].num_speculative_tokens
    if role in ("length", "start") and "gamma_init" in REGISTRY[method].parameters:
        config["gamma_init"] = k
    return config


def speculative_config(name: str, draft: str, k: int, cap: int) -> dict[str, Any] | None:
    """The speculative_config of harness method ``name`` (None: no speculation).

    ``draft``: the draft model's path; ``k``: the initial or fixed length
    (``K_ROLE``); ``cap``: the adaptive methods' cap.
    """
    if name not in METHOD_NAMES:
        raise KeyError(name)
    if name == NO_SPECULATION:
        return None
    if name in VLLM_FIXED_K:
        return {"method": "draft_model", "model": draft, "num_speculative_tokens": k}
    if name == VLLM_NGRAM:
        return {"method": "ngram", "num_speculative_tokens": k, **NGRAM_KEYS}
    if name == "vllm_schedule":
        # vLLM's own batch-size schedule (num_speculative_tokens_per_batch_size),
        # hand-tuned for a CPU where fixed K loses to no speculation in batches:
        # K=k alone, no speculation from batch 2 (docs/results.md, "batch")
        return {"method": "draft_model", "model": draft, "num_speculative_tokens": k,
                "num_speculative_tokens_per_batch_size": [[1, 1, k], [2, 1024, 0]]}
    if name in VARIANTS:
        method, fixed = VARIANTS[name]
        config = {**plugin_config(method, draft, k, cap), **fixed}
        if config.get("drafter") == "ngram":
            del config["model"]
        return config
    return plugin_config(name, draft, k, cap)


def drafts(name: str) -> bool:
    """Whether the method's engine holds a draft model."""
    if name in (NO_SPECULATION, VLLM_NGRAM):
        return False
    drafter = VARIANTS.get(name, (name, {}))[1].get("drafter", DRAFTER_DRAFT_MODEL)
    return DRAFTERS[drafter].takes_model


def check_method_names(methods: Iterable[str], allowed: Iterable[str] = METHOD_NAMES,
                       name_of: Callable[[str], str] = str) -> None:
    """Every ``--methods`` entry names an allowed method (``name_of``: the
    method an entry stands for, e.g. ``NAME#2`` -> ``NAME``); ValueError
    naming the field, the entry and the allowed values otherwise."""
    allowed = list(allowed)
    for method in methods:
        if name_of(method) not in allowed:
            raise ValueError(f"--methods: unknown {method!r}; allowed: {', '.join(allowed)}")


#: ``+NAME`` suffix -> the environment of that engine's processes
ENGINE_ENVIRONMENTS: Mapping[str, Mapping[str, str]] = MappingProxyType({
    "hot": MappingProxyType({"VLLM_GAMMATUNE_CUDA_HOT_PATH": "1"}),
    "host": MappingProxyType({"VLLM_GAMMATUNE_CUDA_HOT_PATH": "0"}),
})


def method_name(engine: str) -> str:
    """``--methods`` entry -> method: ``no_spec#2`` is a second ``no_spec``
    engine (A/A runs); ``vllm_draft_model@3`` is that method at K = 3;
    ``gammatune_cost+hot`` is that method on the CUDA hot path."""
    return engine.partition("#")[0].partition("+")[0].partition("@")[0]


def engine_environment(engine: str) -> Mapping[str, str]:
    """The environment an entry's engine starts with (its ``+NAME``)."""
    suffix = engine.partition("#")[0].partition("+")[2]
    if not suffix:
        return {}
    if suffix not in ENGINE_ENVIRONMENTS:
        raise ValueError(f"--methods: {engine!r}: unknown '+{suffix}'; allowed: "
                         + ", ".join(f"+{name}" for name in ENGINE_ENVIRONMENTS))
    return ENGINE_ENVIRONMENTS[suffix]


@contextlib.contextmanager
def started_with_environment(engine: str) -> Iterator[None]:
    """Set the entry's environment while its engine starts (vLLM's engine
    and worker processes inherit it then), and restore it after."""
    saved = {key: os.environ.get(key) for key in engine_environment(engine)}
    os.environ.update(engine_environment(engine))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def engine_k(engine: str, default: int) -> int:
    """The draft length of an entry: its ``@K``, else ``--k``'s."""
    k = engine.partition("#")[0].partition("+")[0].partition("@")[2]
    if not k:
        return default
    if not k.isdigit() or int(k) < 1:
        raise ValueError(f"--methods: {engine!r}: the length after '@' must be an "
                         "integer >= 1")
    return int(k)
