"""When a step with a prompt chunk drafts.

A step where some request's query is a prompt chunk
(``BatchView.has_prefill``) would, if it drafted, also prefill the draft over
the whole chunk, which the decode-step fit prices far too low, and the batch
the request will decode in is not known yet (``LLM.generate`` hands a
batch's requests to the engine one at a time, so its first step often holds
only the first prompt, at batch 1). Left undrafted, the chunk's draft
prefill becomes the request's catch-up, paid only if the request ever
drafts. So such a step plans as a decode step would (the first pass over
one token per request), and drafts only if that plan's gain ``g`` (the
seconds its expected tokens save at the rate of not drafting, net of its
draft passes, after the clock's correction: ``planner.draft_gain``) beats the
chunk's draft prefill ``C`` (the catch-up fit's per-token cost times the
chunk's tokens) weighed by the chance ``p`` that the request drafts later
anyway:

    draft now  iff  C - g < p * C,  i.e.  g > (1 - p) * C

with ``p`` the decayed share of the decode steps right after a prompt chunk
that drafted for their own sake (probes do not count), kept per batch size
(``catch_ups.BatchShares``): whether a request drafts after its prompt
depends on the batch it decodes in.

- ``p`` starts at 0 at each batch size: a prompt chunk drafts only once
  decode steps after earlier chunks at that batch size, charged the chunk
  as a catch-up, have drafted (starting at 1 the rule would fulfil itself:
  with every chunk drafted, no decode step has a catch-up to weigh).
- Below ``p = 1/2`` no chunk drafts, however short: ``g`` is priced at the
  prompt step's batch size, not the one the request decodes in.
- While nothing has priced a catch-up, ``C`` is unknown: the chunk drafts
  one token for every request with nothing to catch up, so that the draft's
  pass over it is timed (``catch_ups.price_plan``, kind "price"; once per
  engine).

A step with a prompt chunk that does not draft runs no probe either. The
runs behind each rule: ``docs/cost-aware.md``, "Prompt chunks".
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm_gammatune.policies.cost_aware.catch_ups import BatchShares

#: weight kept by the share of decode steps after a prompt chunk that drafted
_AFTER_PROMPT_MEMORY = 0.75
#: below this share no prompt chunk drafts, however short (module docstring)
_MIN_DRAFTS_AFTER_PROMPT = 0.5


class PromptChunks:
    """``p`` per batch size, and whether the last planned step had a prompt
    chunk."""

    def __init__(self):
        #: decayed share of the decode steps right after a prompt chunk that
        #: drafted for their own sake (``p``), per batch size
        self.drafts_after_prompt = BatchShares(_AFTER_PROMPT_MEMORY, initial=0.0)
        self._after_prompt = False

    def waits(self, num_reqs: int) -> bool:
        """No prompt chunk drafts at this batch size, however short
        (``p < 1/2``)."""
        return self.drafts_after_prompt.at(num_reqs) < _MIN_DRAFTS_AFTER_PROMPT

    def drafts(self, gain: float, chunk_seconds: float, num_reqs: int) -> bool:
        """A chunk whose decode-step plan drafts: ``g > (1 - p) C``
        (``chunk_seconds`` is ``C``); always once ``p`` reached 1."""
        p = self.drafts_after_prompt.at(num_reqs)
        return p >= 1.0 or gain > (1.0 - p) * chunk_seconds

    def step_planned(self, has_prefill: bool, plan: Sequence[int]) -> None:
        """A step was planned (before its probes): a decode step right after
        a prompt chunk updates ``p`` at its batch size."""
        if not has_prefill and self._after_prompt:
            self.drafts_after_prompt.add(len(plan), float(max(plan, default=0) > 0))
        self._after_prompt = has_prefill
