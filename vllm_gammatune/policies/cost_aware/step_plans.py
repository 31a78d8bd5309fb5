"""How each kind of step is planned, from the policy's parts (``policy``).

- a decode step: the plan without catch-ups is a sample of ``f`` at its
  batch size (``catch_ups``), which spreads the catch-ups of the plan with
  them (``planner.best_plan``);
- a step with a prompt chunk: the plan of a decode step, if its gain beats
  the chunk's draft prefill weighed by the chance the request drafts later
  anyway (``prompt_chunks``: ``g > (1 - p) C``);
- probes: the longest probe each request may make (``probe_scheduler``,
  ``planner.probe_ceiling``).

Pure Python; ``[num_reqs]`` lists, in batch order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vllm_gammatune.policies.base import BatchView
from vllm_gammatune.policies.cost_aware.acceptance_rates import MAX_RATE
from vllm_gammatune.policies.cost_aware.catch_ups import CatchUpShares
from vllm_gammatune.policies.cost_aware.planner import best_plan, draft_gain, probe_ceiling
from vllm_gammatune.policies.cost_aware.probe_scheduler import ProbeScheduler
from vllm_gammatune.policies.cost_aware.prompt_chunks import PromptChunks
from vllm_gammatune.policies.cost_aware.request_state import ProbeRecord
from vllm_gammatune.policies.cost_aware.step_costs import CostFits, StepCosts


@dataclass(frozen=True)
class PlanRules:
    """The policy's settings every plan is made under (``CostAwarePolicy``)."""

    max_num_draft_tokens: int
    min_draft_gain: float
    keep_pace: bool
    #: parts switched off (``ablation``): "probes" (no request at length 0
    #: probes), "prompt_chunk_rule" (a step with a prompt chunk drafts
    #: wherever a decode step would)
    ablated: frozenset[str] = frozenset()

    def best(self, costs: StepCosts, rates: Sequence[float], batch: BatchView,
             drafting_share: float = 1.0,
             free_plan: list[int] | None = None) -> list[int]:
        """``planner.best_plan`` for the step's requests."""
        return best_plan(costs, rates, batch.catch_up_tokens, batch.remaining_tokens,
                         batch.draft_limits, max_num_draft_tokens=self.max_num_draft_tokens,
                         min_draft_gain=self.min_draft_gain, drafting_share=drafting_share, free_plan=free_plan,
                         keep_pace=self.keep_pace)

    def decode_step(self, costs: StepCosts, rates: list[float], batch: BatchView,
                    shares: CatchUpShares) -> list[int]:
        """A decode step's plan; its plan without catch-ups teaches ``f``."""
        num_reqs = len(rates)
        free = best_plan(costs, rates, draft_limits=batch.draft_limits,
                         max_num_draft_tokens=self.max_num_draft_tokens,
                         min_draft_gain=self.min_draft_gain, keep_pace=self.keep_pace)
        shares.free_drafting.add_plan(free)
        plan = free if not any(batch.catch_up_tokens) else self.best(
            costs, rates, batch, shares.free_drafting.at(num_reqs), free)
        shares.planned_drafting.add_plan(plan)
        return plan

    def prompt_step(self, fits: CostFits, rates: list[float], batch: BatchView,
                    chunks: PromptChunks, shares: CatchUpShares) -> list[int]:
        """A step with a prompt chunk: a decode step's plan, or none."""
        num_reqs = len(rates)
        chunk_rule = "prompt_chunk_rule" not in self.ablated
        if chunk_rule and chunks.waits(num_reqs):
            return [0] * num_reqs  # most requests do not draft later: wait
        # lengths as in a decode step: the first pass over one token each
        decode_costs = fits.at(num_reqs, num_reqs)
        plan = self.best(decode_costs, rates, batch,
                         shares.free_drafting.at(num_reqs))
        if max(plan, default=0) == 0 or not chunk_rule:
            return plan
        catch_up_line = fits.catch_up_line(num_reqs)
        assert catch_up_line is not None, "plan_batch prices catch-ups first"
        gain = draft_gain(decode_costs, rates, plan, batch.catch_up_tokens)
        chunk_seconds = catch_up_line[1] * max(0, batch.num_scheduled_tokens - num_reqs)
        return plan if chunks.drafts(gain, chunk_seconds, num_reqs) else [0] * num_reqs

    def probe_limits(self, probes: ProbeScheduler, records: list[ProbeRecord],
                     plan: list[int], costs: StepCosts, batch: BatchView,
                     shares: CatchUpShares) -> list[int]:
        """The longest probe each request may make, 0 for none: none while a
        prompt chunk waits, none where even drafts that are always right
        would not make the step draft (a catch-up that holds the batch back
        under the pace rule stops them: what the others would learn could
        not change this batch's plan), and none for a request whose catch-up
        not even such a draft would repay (``probe_ceiling``)."""
        num_reqs = len(plan)
        deferred = batch.has_prefill and max(plan, default=0) == 0
        if "probes" in self.ablated or deferred or not probes.any_due(records, plan) or (
                max(plan) == 0
                and max(self.best(costs, [MAX_RATE] * num_reqs, batch,
                                  shares.free_drafting.at(num_reqs))) == 0):
            return [0] * num_reqs
        return probe_ceiling(costs, num_reqs, batch.catch_up_tokens, batch.remaining_tokens,
                             batch.draft_limits, max_num_draft_tokens=self.max_num_draft_tokens,
                             drafting_share=shares.planned_drafting.at(num_reqs))
