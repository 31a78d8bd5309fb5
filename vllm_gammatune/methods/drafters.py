"""Where a method's draft tokens come from: the plugin key ``drafter``.

A plugin method plans how many draft tokens each request verifies; the
drafter proposes them. Two of vLLM's drafters can be driven:

- ``"draft_model"`` (the default): vLLM's ``draft_model`` machinery, a small
  model sharing the target's vocabulary (``speculative_config['model']``),
  with its own paged KV cache. Every method can drive it.
- ``"ngram"``: vLLM's prompt lookup (``method: "ngram"``): the tokens that
  followed the earliest earlier occurrence of the request's longest suffix
  of ``n`` tokens that occurs before, ``prompt_lookup_min <= n <=
  prompt_lookup_max`` (vLLM's keys and vLLM's defaults: both 5 when
  neither is given, the other's value when one is).
  It runs no model, on the host, so a draft costs (almost) nothing; it
  offers no draft distribution, so a method that stops on the draft's
  confidence or entropy cannot drive it, and ``gammatune_cost``'s per-token
  stop (``token_stop``) is off.
- ``"ngram+draft_model"``: the n-gram lookup ahead of the draft model. Per
  request and step, a lookup's draft is verified where it is worth more than
  the draft model's (``policies.cost_aware.free_drafts``), and the draft
  model runs only for the requests left to it (none: it is skipped, and
  caught up where it drafts again). Only a policy that prices both sources
  from measured costs can drive it (``gammatune_cost``). The n-gram keys are
  the plugin's here (vLLM's ``draft_model`` has none): they reach the
  drafter through the plugin's settings, with vLLM's n-gram defaults.

Pure Python (no vLLM import).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vllm_gammatune.methods.parameters import GammaTuneConfigError, require_int

DRAFTER_DRAFT_MODEL = "draft_model"
DRAFTER_NGRAM = "ngram"
DRAFTER_NGRAM_THEN_MODEL = "ngram+draft_model"
#: vLLM's n-gram keys (``SpeculativeConfig.prompt_lookup_min`` / ``_max``)
NGRAM_KEYS = ("prompt_lookup_min", "prompt_lookup_max")


@dataclass(frozen=True)
class Drafter:
    """One of vLLM's drafters, as a plugin method drives it."""

    name: str
    description: str
    #: vLLM's ``speculative_config['method']`` underneath
    vllm_method: str
    #: it proposes from a model with a distribution per draft token (what a
    #: confidence, entropy or per-token stop reads)
    offers_distributions: bool
    #: it needs ``speculative_config['model']``
    takes_model: bool
    #: keys only this drafter reads
    own_keys: tuple[str, ...] = ()
    #: its own keys go to vLLM's config (else to the plugin's settings,
    #: ``MethodSettings.drafter_options``)
    vllm_reads_own_keys: bool = True
    #: it needs a policy that chooses between a free draft and the draft
    #: model's (``Method.plans_free_drafts``)
    needs_free_draft_planner: bool = False


DRAFTERS: dict[str, Drafter] = {d.name: d for d in (
    Drafter(DRAFTER_DRAFT_MODEL, "a draft model sharing the target's vocabulary",
            "draft_model", offers_distributions=True, takes_model=True),
    Drafter(DRAFTER_NGRAM, "prompt lookup: the text that followed the last n tokens "
            "earlier in the request (no model)", "ngram", offers_distributions=False,
            takes_model=False, own_keys=NGRAM_KEYS),
    Drafter(DRAFTER_NGRAM_THEN_MODEL, "the n-gram lookup where its draft is worth more, "
            "else the draft model", "draft_model", offers_distributions=True,
            takes_model=True, own_keys=NGRAM_KEYS, vllm_reads_own_keys=False,
            needs_free_draft_planner=True),
)}


def drafter_of(config: Mapping[str, Any], method: str, needs_distributions: bool,
               plans_free_drafts: bool = False) -> Drafter:
    """The drafter ``config`` asks for, checked against the method and the
    keys given. Raises ``GammaTuneConfigError`` naming the field, the value
    and what is allowed."""
    name = config.get("drafter", DRAFTER_DRAFT_MODEL)
    drafter = DRAFTERS.get(name) if isinstance(name, str) else None
    if drafter is None:
        raise GammaTuneConfigError(
            f"speculative_config['drafter']={name!r} is not allowed: must be one of "
            f"{', '.join(repr(d) for d in DRAFTERS)}")
    if needs_distributions and not drafter.offers_distributions:
        raise GammaTuneConfigError(
            f"speculative_config['drafter']={name!r} is not allowed with method "
            f"{method!r}: the method stops each draft on the draft model's "
            f"distribution, which the {name} drafter does not have; allowed: "
            f"{', '.join(repr(d.name) for d in DRAFTERS.values() if d.offers_distributions)}")
    if drafter.needs_free_draft_planner and not plans_free_drafts:
        raise GammaTuneConfigError(
            f"speculative_config['drafter']={name!r} is not allowed with method "
            f"{method!r}: choosing between the n-gram's draft and the draft model's "
            "needs a policy that prices both from measured costs; allowed: method "
            "'gammatune_cost', or drafter 'ngram' or 'draft_model' with this method")
    if drafter.takes_model and not config.get("model"):
        raise GammaTuneConfigError(
            f"speculative_config['model'] is missing: method {method!r} with drafter "
            f"{name!r} needs a draft model that shares the target's vocabulary "
            "(a path or name)")
    if not drafter.takes_model and config.get("model") is not None:
        raise GammaTuneConfigError(
            f"speculative_config['model']={config['model']!r} is not allowed with "
            f"drafter {name!r}: it runs no draft model and would ignore it; remove "
            f"'model', or use drafter {DRAFTER_DRAFT_MODEL!r}")
    for other in DRAFTERS.values():
        for key in other.own_keys:
            if key in config and key not in drafter.own_keys:
                raise GammaTuneConfigError(
                    f"speculative_config[{key!r}]={config[key]!r} is not allowed with "
                    f"drafter {name!r}, which would ignore it; it is read by drafter "
                    f"{other.name!r}")
    if drafter.own_keys == NGRAM_KEYS:
        _check_ngram_bounds(config)
    return drafter


def ngram_bounds(config: Mapping[str, Any]) -> dict[str, int]:
    """``prompt_lookup_min`` and ``_max`` as vLLM resolves them
    (``SpeculativeConfig``): both 5 when neither is given, the other's value
    when one is. ``config`` was checked by ``drafter_of``."""
    low, high = (config.get(key) for key in NGRAM_KEYS)
    if low is None and high is None:
        low = high = 5
    low = high if low is None else low
    high = low if high is None else high
    return {"prompt_lookup_min": low, "prompt_lookup_max": high}


def drafter_options(config: Mapping[str, Any], drafter: Drafter) -> dict[str, Any]:
    """The drafter's own keys the plugin keeps (``vllm_reads_own_keys``
    False), resolved; {} where vLLM reads them."""
    if drafter.vllm_reads_own_keys or not drafter.own_keys:
        return {}
    return ngram_bounds(config)


def _check_ngram_bounds(config: Mapping[str, Any]) -> None:
    """vLLM's bounds on the n-gram keys (``SpeculativeConfig``), checked at
    start with the plugin's error: each an integer >= 1, min <= max."""
    values = {key: require_int(key, config[key], ">= 1 (tokens in the n-gram)", low=1)
              for key in NGRAM_KEYS if config.get(key) is not None}
    if len(values) == 2 and values["prompt_lookup_min"] > values["prompt_lookup_max"]:
        raise GammaTuneConfigError(
            f"speculative_config['prompt_lookup_min']={values['prompt_lookup_min']!r} "
            f"is not allowed: must be <= prompt_lookup_max="
            f"{values['prompt_lookup_max']!r} (the shortest n-gram matched, the "
            "longest)")
