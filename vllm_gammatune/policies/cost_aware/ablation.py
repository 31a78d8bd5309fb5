"""Parts of the cost-aware policy switched off, for measurement only.

Each part of ``gammatune_cost`` must earn its place: switched off in turn,
what it is worth is measured (``docs/cost-aware.md``, "What each part is
worth"). ``ABLATABLE_PARTS`` are those without a parameter of their own (the
per-token stop, the pace rule and the margin have theirs: ``token_stop``,
``keep_pace``, ``min_draft_gain``). Pure Python.
"""

from __future__ import annotations

from collections.abc import Collection
from types import MappingProxyType

#: part -> what the policy does without it
ABLATABLE_PARTS = MappingProxyType({
    "probes": "no probes: a request at length 0 drafts again only when a plan drafts it",
    "prompt_chunk_rule": "a step with a prompt chunk drafts wherever a decode step would",
    "catch_up_pricing": "plans charge nothing for catch-ups, and no step prices them",
    "shrinkage": "a request's acceptance rate from its own verifications alone (the "
                 "engine's until it has one)",
    "token_model": "a draft token's acceptance is the draft's own probability (the token "
                   "model does not learn)",
})


def ablated_parts(ablate: Collection[str]) -> frozenset[str]:
    """The parts named, each one of ``ABLATABLE_PARTS`` (ValueError otherwise)."""
    unknown = sorted(set(ablate) - set(ABLATABLE_PARTS))
    if unknown:
        raise ValueError(f"ablate: unknown part(s) {', '.join(unknown)}; allowed: "
                         f"{', '.join(ABLATABLE_PARTS)}")
    return frozenset(ablate)
