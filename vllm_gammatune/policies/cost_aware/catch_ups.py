"""Catch-up pricing: what a plan is charged for a request's missed positions.

A step that skips the draft model leaves positions the draft must process
before that request drafts again (its catch-up, ``BatchView.catch_up_tokens``).
The catch-up pass's seconds come from its own fit (``step_costs.CostFits``,
``catch_up_line``); this module holds the rest of its price:

- the share of a drafting request's catch-up its plan is charged now
  (``catch_up_share``): one over the steps it will still draft, so a long
  prompt's catch-up is spread over the tokens it will repay it with;
- the shares that say how often requests draft (``CatchUpShares``): ``f``
  (plans without catch-ups, which spreads the catch-ups of the plans with
  them) and the share plans drafted (how often a request that probes would
  draft after its catch-up), each kept per batch size (``BatchShares``; the
  prompt-chunk rule keeps its ``p`` so too), since drafting may pay with a
  wide margin at batch 1 and not at all at batch 8: a share learnt while
  the server was quiet says little about a busy batch;
- the plan that prices the catch-up pass before anything has timed one
  (``price_plan``).

Why: ``docs/cost-aware.md``, "Length 0 skips the draft model". Pure Python.
"""

from __future__ import annotations

from collections.abc import Sequence

#: a catch-up is spread over at most this many of a request's remaining
#: tokens (a request without ``max_tokens`` may stop at any EOS)
CATCH_UP_HORIZON_TOKENS = 256
#: weight kept by the drafting shares per decode step at its batch size (a
#: window of about 10 steps: a busy phase's first steps teach them); both
#: start at 0, so the first steps at a batch size spread no catch-up until
#: their plans have shown that requests there draft
_BATCH_SHARE_MEMORY = 0.9


def catch_up_share(rate: float, remaining_tokens: int | None, max_num_draft_tokens: int,
                   drafting_share: float = 1.0) -> float:
    """The share of a drafting request's catch-up its plan is charged now:
    one over the steps it will still draft, at most ``f R / (f E + 1 - f)``
    with ``R = min(remaining_tokens, CATCH_UP_HORIZON_TOKENS)``, ``f`` the
    ``drafting_share`` and ``E = min(1 / (1 - rate), K + 1)`` the most tokens
    a drafted step emits. Unknown remaining tokens: all of it now."""
    if remaining_tokens is None:
        return 1.0
    f = drafting_share
    most_tokens = min(1.0 / (1.0 - rate), max_num_draft_tokens + 1.0)
    steps = (f * min(remaining_tokens, CATCH_UP_HORIZON_TOKENS)
             / (f * most_tokens + 1.0 - f))
    return 1.0 / max(1.0, steps)


def price_plan(catch_up_tokens: Sequence[int], num_reqs: int) -> list[int]:
    """Every request with nothing to catch up drafts one token, so that the
    draft's pass over the step's prompt chunk is the catch-up price's first
    sample."""
    catch_up = list(catch_up_tokens) or [0] * num_reqs
    return [0 if missed else 1 for missed in catch_up]


class BatchShares:
    """A decayed share in [0, 1] per batch size.

    Args:
        memory: weight kept by the older samples of a batch size per new one.
        initial: the share of a batch size before its first sample.
    """

    def __init__(self, memory: float, initial: float):
        self.memory = memory
        self.initial = initial
        #: batch size -> share
        self._shares: dict[int, float] = {}

    def at(self, num_reqs: int) -> float:
        return self._shares.get(num_reqs, self.initial)

    def add(self, num_reqs: int, sample: float) -> None:
        m = self.memory
        self._shares[num_reqs] = m * self.at(num_reqs) + (1.0 - m) * sample

    def add_plan(self, plan: Sequence[int]) -> None:
        """The share of a plan's requests that draft, at its batch size."""
        self.add(len(plan), (len(plan) - plan.count(0)) / len(plan))  # lengths are >= 0


class CatchUpShares:
    """Per batch size, how often decode steps' plans draft requests."""

    def __init__(self):
        #: ``f``: the share of requests a decode step's plan without
        #: catch-ups drafts (``catch_up_share``'s ``drafting_share``)
        self.free_drafting = BatchShares(_BATCH_SHARE_MEMORY, initial=0.0)
        #: the share of requests decode steps' plans drafted, catch-ups and
        #: pace included, probes not: how often a request that probes there
        #: would draft after its catch-up (``planner.probe_ceiling``)
        self.planned_drafting = BatchShares(_BATCH_SHARE_MEMORY, initial=0.0)
