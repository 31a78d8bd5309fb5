"""What catching the draft up costs a plan, and when a prompt chunk drafts.

Catch-ups. After steps that skip the draft model, a request that drafts
again first runs the draft over the positions it missed (its catch-up
tokens). That pass is paid once and serves every later draft of the request,
so a plan is charged the share of it that its remaining drafting steps leave
to this one (``catch_up_share``): spread over at most ``remaining_tokens``
(capped at ``CATCH_UP_HORIZON_TOKENS``) times ``1 - a`` steps, since a draft
with acceptance rate ``a`` emits at most ``1 / (1 - a)`` tokens a step (the
fewest steps: the largest share). A request drafts on later steps if its
drafting pays at the batch without the catch-up: so a plan first finds the
requests that would draft were nothing to catch up (none: the step skips,
since a catch-up only adds cost), spreads those requests' catch-ups, and
charges every other request its catch-up whole. A new request that would
catch up hundreds of prompt tokens where drafting does not pay (concurrency
4 on the 2-core CPU: the pass takes 1.5-2.4 s against 0.2 s for a step
without drafting) thus never catches up; where drafting pays (batch 1), it
catches up at once, however long the engine went without drafting. (An
engine-wide share of recent drafted steps in place of that test would be
self-fulfilling: after a stretch of text where drafting did not pay, every
new request's prompt would be charged whole and the engine would never
draft again.)

A catch-up is priced by its own fit (``catch_up_line``): catch-up passes run
over many positions per request, like a prefill, where a token costs far
more than in a decode pass (a decode pass over 2 or 17 tokens costs about
the same on a CPU, so its slope prices a 2,160-token catch-up at 0.18 s
where it takes 5 s). The draft's passes over prompt chunks feed the same
fit.

Prompt chunks. A step where some request's query is a prompt chunk
(``BatchView.has_prefill``) would, if it drafted, also prefill the draft over
the whole chunk, which the decode-step fit prices far too low, and the batch
the request will decode in is not known yet: ``LLM.generate`` hands a
batch's requests to the engine one at a time, so its first step often holds
only the first prompt, at batch 1, where drafting pays, while the batch then
decodes at 4, where it does not (on the 2-core CPU, batches of 4 that
drafted just that once ran at 0.965 of no speculation, those that never
drafted at 1.015). Left undrafted, the chunk's draft prefill becomes the
request's catch-up, paid only if the request ever drafts. So such a step
plans as a decode step would (the first pass over one token per request),
and drafts only if that plan's gain ``g`` (the seconds its expected tokens
save at the rate of not drafting, net of its draft passes, after the
clock's correction) beats the chunk's draft prefill ``C`` (the catch-up
fit's per-token cost times the chunk's tokens) weighed by the chance ``p``
that the request drafts later anyway:

    draft now  iff  C - g < p * C,  i.e.  g > (1 - p) * C

with ``p`` the decayed share of the decode steps right after a prompt chunk
that drafted for their own sake (probes do not count).

- ``p`` starts at 0: a prompt chunk drafts only once decode steps after
  earlier chunks, charged the chunk as a catch-up, have drafted. At 1 the
  rule fulfils itself: with every chunk drafted no decode step has a
  catch-up to weigh, so batches of 4 draft on their decode steps too and
  keep ``p`` at 1 (on the 2-core CPU the draft's prefill of their prompts
  alone, ~2 ms a token, costs them a fifth of their time).
- Below ``p = 1/2`` no chunk drafts, however short: ``g`` is priced at the
  prompt step's batch size, not the one the request decodes in, and with
  ``p`` near 0 at batch 4 the short first prompt of a batch would still
  draft in about half the batches, at 0.96 of no speculation against 1.005
  for those that do not.
- While nothing has priced a catch-up, ``C`` is unknown: the chunk drafts
  one token for every request with nothing to catch up, so that the draft's
  pass over it is timed (kind "price"; once per engine). The warm-up
  usually provides that sample (until the costs are measured every step
  drafts, the first prompt included); a server's first request may be a
  one-token "Hello" that times no prompt pass.

At batch 4 on that CPU ``p`` stays near 0 and the chunks wait; at batch 1,
where decode steps draft even with a catch-up to pay, ``p`` rises toward 1
and prompt chunks draft. A step with a prompt chunk that does not draft runs
no probe either.

``CatchUpPricing`` is a part of ``CostAwarePolicy``: it reads the policy's
planner (``best_plan``, ``predicted_step``) and its check against the clock.
"""

from __future__ import annotations

from dataclasses import replace

from vllm_gammatune.policies.base import BatchView
from vllm_gammatune.policies.cost_aware.state import CostAwareState
from vllm_gammatune.policies.cost_model import BatchLocalLinearCost, FixedLinearCost

#: weight kept by the share of decode steps after a prompt chunk that drafted
_AFTER_PROMPT_MEMORY = 0.75
#: below this share no prompt chunk drafts, however short (module docstring)
_MIN_DRAFTS_AFTER_PROMPT = 0.5
#: a catch-up is spread over at most this many of a request's remaining
#: tokens (a request without ``max_tokens`` may stop at any EOS)
CATCH_UP_HORIZON_TOKENS = 256
#: weight kept per step by the share of steps that drafted for their own
#: sake (``drafting_share``: a window of about 50 steps)
_DRAFTING_SHARE_MEMORY = 0.98


class CatchUpPricing:
    """The catch-up fit, each request's share of a catch-up, and the
    prompt-chunk rule."""

    def _init_catch_up_pricing(self, draft_cost: FixedLinearCost | None) -> None:
        #: catch-up passes get their own fit (``catch_up_line``), which the
        #: draft's passes over prompt chunks also feed; the decode draft cost
        #: stands in when costs are fixed. Timed around the forward alone,
        #: they hold no idle gap: none is dropped as an outlier (a catch-up
        #: far larger than any before is exactly the sample the fit needs).
        self.catch_up_cost = (BatchLocalLinearCost(locality=0.0, drop_outliers=False)
                              if draft_cost is None else draft_cost)
        #: decayed share of the decode steps right after a prompt chunk that
        #: drafted for their own sake (``p`` of ``_prompt_step_plan``)
        self._drafts_after_prompt = 0.0
        #: whether the last planned step had a prompt chunk
        self._after_prompt = False
        #: decayed share of recent steps that drafted for their own sake
        #: (warm-up included, probes not), reported in traces
        self.drafting_share = 1.0

    def catch_up_line(self, num_reqs: int) -> tuple[float, float] | None:
        """(base, per token) seconds of a catch-up pass: the catch-up fit
        once ready; before, its samples' seconds per token with no base
        (proportional: a line through one or two passes would extrapolate a
        pass of a few hundred tokens to thousands at a decode pass's slope);
        None before any catch-up or prompt pass of the draft was timed, which
        is brief: the warm-up's prompt pass is a sample, and if it was too
        short to be one, the next prompt chunk drafts to be one
        (``_price_plan``). While it is None, the decode draft line stands in."""
        fit = self.catch_up_cost
        if fit.ready:
            return fit.coefficients(num_reqs)
        rate = fit.seconds_per_token()
        return None if rate is None else (0.0, rate)

    @staticmethod
    def catch_up_share(rate: float, remaining_tokens: int | None) -> float:
        """The share of a drafting request's catch-up its plan is charged
        now: one over the steps it has left, at most
        ``min(remaining_tokens, CATCH_UP_HORIZON_TOKENS) * (1 - rate)``
        (module docstring). Unknown remaining tokens: all of it now."""
        if remaining_tokens is None:
            return 1.0
        steps = min(remaining_tokens, CATCH_UP_HORIZON_TOKENS) * (1.0 - rate)
        return 1.0 / max(1.0, steps)

    def _needs_price(self, batch: BatchView, num_reqs: int) -> bool:
        """A prompt chunk while nothing has priced a catch-up yet."""
        return batch.has_prefill and self.catch_up_line(num_reqs) is None

    def _price_plan(self, states: list[CostAwareState], batch: BatchView) -> list[int]:
        """Every request with nothing to catch up drafts one token, so the
        draft's pass over this chunk is the price's first sample."""
        catch_up = list(batch.catch_up_tokens) or [0] * len(states)
        self._after_prompt = True
        return [0 if missed else 1 for missed in catch_up]

    def _note_decode_plan(self, plan: list[int]) -> None:
        """A decode step's plan: right after a prompt chunk, it updates ``p``."""
        if self._after_prompt:
            m = _AFTER_PROMPT_MEMORY
            self._drafts_after_prompt = (m * self._drafts_after_prompt
                                         + (1.0 - m) * (max(plan, default=0) > 0))

    def _count_drafting(self, plan: list[int]) -> None:
        m = _DRAFTING_SHARE_MEMORY
        self.drafting_share = m * self.drafting_share + (1.0 - m) * (max(plan, default=0) > 0)

    def _prompt_step_plan(self, states: list[CostAwareState], batch: BatchView,
                          rates: list[float]) -> list[int]:
        """A step with a prompt chunk: the plan of a decode step, if its gain
        beats the chunk's draft prefill weighed by the chance the request
        drafts later anyway (module docstring: ``g > (1 - p) C``)."""
        num_reqs = len(states)
        p = self._drafts_after_prompt
        if p < _MIN_DRAFTS_AFTER_PROMPT:
            return [0] * num_reqs  # most requests do not draft later: wait
        # [batch] lengths as in a decode step: the first pass over one token each
        decode_step = replace(batch, num_scheduled_tokens=num_reqs, has_prefill=False)
        plan = self.best_plan(states, decode_step, rates=rates)
        if max(plan, default=0) == 0 or p >= 1.0:
            return plan
        catch_up_line = self.catch_up_line(num_reqs)
        assert catch_up_line is not None, "plan_batch prices catch-ups first"
        tokens, seconds = self.predicted_step(rates, decode_step, plan)
        base_tokens, base_seconds = self.predicted_step(rates, decode_step, [0] * num_reqs)
        scale = (1.0 if self.cycle_check is None
                 else self.cycle_check.drafting_scale(num_reqs))
        gain = tokens * base_seconds / base_tokens - seconds / scale
        prompt_tokens = max(0, batch.num_scheduled_tokens - num_reqs)
        prompt_seconds = catch_up_line[1] * prompt_tokens
        return plan if gain > (1.0 - p) * prompt_seconds else [0] * num_reqs
