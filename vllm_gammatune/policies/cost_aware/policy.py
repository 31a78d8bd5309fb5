"""Cost-aware draft lengths: the most generated tokens per second of engine time.

Neither paper weighs what a draft token costs; at batch 1 on a GPU verifying
one more token is nearly free, but as the batch grows (and on a CPU already at
batch 4) each draft token costs real target time, and fixed-K speculation
becomes slower than none. ``CostAwarePolicy`` chooses, every step and for
every request of the batch jointly, the draft lengths (0 allowed) that
maximise expected tokens per second, from step costs the engine measures
while it serves. When every request plans 0 the proposer skips the draft
model for the step, so the step costs what a step without speculation costs.

The policy owns its parts, each with its own state, and passes each what it
needs: the cost fits (``costs``, ``step_costs``), the check against the clock
(``cycle_check``), the acceptance rates (``acceptance``,
``acceptance_rates``), the probe scheduler (``probes``, ``probe_scheduler``),
the prompt-chunk rule (``prompt_chunks``), the per-token stop
(``token_stop``) and the drafting share the traces report (``drafting``,
``decision``); the planner is pure functions (``planner``).

Each step's plan (``plan_batch``) goes through, in order:

1. the check against the clock (``cycle_check``): the previous plan's
   cycle, as measured, corrects the model's view of drafting
   (``drafting_scale``), and the probe budget settles what its probes lost
   (``probe_scheduler``);
2. warm-up: until both cost fits have samples, every request drafts
   ``warmup_num_draft_tokens``;
3. pricing: a prompt chunk while nothing has priced a catch-up drafts to
   time the draft's pass over it (``prompt_chunks``);
4. the plan: the lengths maximising expected tokens per second
   (``planner``), with each request's acceptance rate (``acceptance_rates``)
   and its share of any catch-up, drafted only if every request that can
   draft keeps pace (``planner``, "Pace"); a step with a prompt chunk
   drafts only if the plan's gain beats the chunk's draft prefill
   (``prompt_chunks``);
5. probes: requests at length 0 that are due draft one token, within the
   engine's probe budget (``probe_scheduler``);
6. the check against the clock opens this plan's cycle with its prediction
   (not where free drafts are verified: ``free_drafts``);
7. the per-token stop (``token_stop``): in a decode step, a request that
   drafts for its own sake may draft up to the cap, and after each token
   the rule ends its draft once the next token would not pay; each
   verification calibrates the rule's token acceptance
   (``token_acceptance``);
8. the record of the decision, for traces (``decision``).
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm_gammatune.policies.base import BatchView, DraftLengthPolicy
from vllm_gammatune.policies.cost_aware.acceptance_rates import MAX_RATE, AcceptanceRates
from vllm_gammatune.policies.cost_aware.batch_shares import BatchShares
from vllm_gammatune.policies.cost_aware.cycle_check import CycleCheck
from vllm_gammatune.policies.cost_aware.decision import (
    DraftingShare,
    PlannedStep,
    StepDecision,
)
from vllm_gammatune.policies.cost_aware.free_drafts import free_draft_lengths
from vllm_gammatune.policies.cost_aware.linear_costs import (
    BatchLocalLinearCost,
    FixedLinearCost,
)
from vllm_gammatune.policies.cost_aware.planner import (
    best_plan,
    predicted_step,
    probe_ceiling,
)
from vllm_gammatune.policies.cost_aware.probe_scheduler import ProbeScheduler
from vllm_gammatune.policies.cost_aware.prompt_chunks import (
    PromptChunks,
    draft_gain,
    price_plan,
)
from vllm_gammatune.policies.cost_aware.request_state import CostAwareState
from vllm_gammatune.policies.cost_aware.step_costs import CostFits, StepCosts
from vllm_gammatune.policies.cost_aware.token_stop import TokenPrices, TokenStop

#: weight kept by the drafting shares per decode step at its batch size
#: (``free_drafting``, ``planned_drafting``; a window of about 10 steps: a
#: busy phase's first steps teach them); both start at 0, so the first steps
#: at a batch size spread no catch-up until their plans have shown that
#: requests there draft
_BATCH_SHARE_MEMORY = 0.9


class CostAwarePolicy(DraftLengthPolicy):
    """Per-step joint draft lengths maximising expected tokens per second.

    Args:
        max_num_draft_tokens: the cap (vLLM's num_speculative_tokens).
        probe_interval: steps at length 0 before a request probes with one
            token (a new request's first probe comes at once).
        max_probe_interval: the interval's ceiling after backoff.
        memory: weight kept by older acceptance observations per new one.
        prior_weight: pseudo-observations pulling a request's rate toward the
            engine-wide rate.
        warmup_num_draft_tokens: length drafted while the step costs are not
            measured yet (both costs need a few samples).
        target_cost, draft_cost: fixed costs instead of measured ones.
        check_cycles: correct drafted plans by their measured efficiency
            against the model's (``CycleCheck``); off: the model alone.
        probe_budget: the share of predicted engine time that probes may lose
            in steps that would not draft otherwise (1.0: no limit).
        min_draft_gain: a step drafts (beyond probes) only if its predicted
            tokens per second beat not drafting by at least this fraction.
        token_stop: the per-token stop (``token_stop``); off, a request
            drafts the length the step plan gave it.
        keep_pace: a step drafts only if every request that can draft
            expects at least the tokens per second it would get were the step
            not drafted (``planner``, "Pace"); off, the batch's tokens per
            second alone decide.
    """

    #: it plans from measured step costs, and may plan 0 for a whole step
    times_steps = True
    skips_drafts = True
    #: it prices a free draft against the draft model's (``free_drafts``)
    plans_free_drafts = True
    #: the token probabilities are read after every pass, the per-token stop
    #: on or off: they calibrate its acceptance model and feed traces
    decides_per_token = True

    def __init__(
        self,
        max_num_draft_tokens: int,
        probe_interval: int = 8,
        max_probe_interval: int = 256,
        memory: float = 0.9,
        prior_weight: float = 2.0,
        warmup_num_draft_tokens: int = 2,
        target_cost: FixedLinearCost | None = None,
        draft_cost: FixedLinearCost | None = None,
        check_cycles: bool = True,
        probe_budget: float = 0.01,
        min_draft_gain: float = 0.05,
        token_stop: bool = True,
        keep_pace: bool = True,
    ):
        super().__init__(max_num_draft_tokens)
        if probe_interval < 1 or max_probe_interval < probe_interval:
            raise ValueError("need 1 <= probe_interval <= max_probe_interval")
        if not 0.0 < probe_budget <= 1.0:
            raise ValueError(f"probe_budget must be in (0, 1], got {probe_budget}")
        if not 0.0 <= min_draft_gain < 1.0:
            raise ValueError(f"min_draft_gain must be in [0, 1), got {min_draft_gain}")
        self.min_draft_gain = min_draft_gain
        self.keep_pace = keep_pace
        self.warmup_num_draft_tokens = min(warmup_num_draft_tokens, max_num_draft_tokens)
        self.costs = CostFits(target_cost, draft_cost)
        self.cycle_check = CycleCheck() if check_cycles else None
        self.acceptance = AcceptanceRates(memory, prior_weight)
        #: the acceptance of free drafts (an n-gram's), per request and
        #: engine-wide, apart from the draft model's (``free_drafts``)
        self.free_acceptance = AcceptanceRates(memory, prior_weight)
        self.probes = ProbeScheduler(probe_interval, max_probe_interval, probe_budget)
        self.prompt_chunks = PromptChunks()
        #: ``f`` per batch size: the share of requests a decode step's plan
        #: without catch-ups drafts (``planner.catch_up_share``)
        self.free_drafting = BatchShares(_BATCH_SHARE_MEMORY, initial=0.0)
        #: per batch size, the share of requests decode steps' plans drafted,
        #: catch-ups and pace included, probes not: how often a request that
        #: probes there would draft after its catch-up (``probe_ceiling``)
        self.planned_drafting = BatchShares(_BATCH_SHARE_MEMORY, initial=0.0)
        self.token_stop = TokenStop(token_stop)
        self.drafting = DraftingShare()
        #: what the last ``plan_batch`` chose, for ``last_decision``
        self._planned: PlannedStep | None = None
        #: a ruled draft may run to the cap: the drafter ends the loop when
        #: the rule stops every draft (off where it runs every planned pass)
        self._ruled_drafts_run_to_cap = True

    def adapt_to_drafter(self, runs_every_planned_pass: bool, observation_lag: int,
                         keeps_draft_kv: bool = True) -> None:
        """A drafter without early exit pays for every planned pass, so a
        ruled draft is planned at the step plan's length, and the per-token
        stop only trims it; verifications that arrive one plan late are
        matched with the draft they verify (``TokenStop.verified_draft``); a
        drafter without a draft KV cache has no catch-up to price
        (``CostFits.without_catch_ups``)."""
        self._ruled_drafts_run_to_cap = not runs_every_planned_pass
        self.token_stop.verification_lag = observation_lag
        if not keeps_draft_kv:
            self.costs.without_catch_ups()

    # -- the parts' settings that tools and tests read -------------------------
    @property
    def probe_budget(self) -> float:
        """The probe scheduler's budget (settable while the engine runs)."""
        return self.probes.budget

    @probe_budget.setter
    def probe_budget(self, value: float) -> None:
        self.probes.budget = value

    @property
    def target_cost(self) -> BatchLocalLinearCost | FixedLinearCost:
        return self.costs.target

    @property
    def draft_cost(self) -> BatchLocalLinearCost | FixedLinearCost:
        return self.costs.draft

    def catch_up_line(self, num_reqs: int) -> tuple[float, float] | None:
        """(base, per token) seconds of a catch-up pass (``CostFits``)."""
        return self.costs.catch_up_line(num_reqs)

    # -- step costs, fed by the proposer ------------------------------------
    def observe_target_step(self, num_scheduled_tokens: int, seconds: float,
                            batch_size: int = 1) -> None:
        self.costs.add_target_step(num_scheduled_tokens, seconds, batch_size)
        if self.cycle_check is not None:
            self.cycle_check.on_target_step(seconds, batch_size)

    def observe_draft_pass(self, num_tokens: int, seconds: float,
                           batch_size: int = 1) -> None:
        self.costs.add_draft_pass(num_tokens, seconds, batch_size)
        if self.cycle_check is not None:
            self.cycle_check.on_draft_pass(seconds)

    def observe_catch_up_pass(self, num_tokens: int, seconds: float) -> None:
        self.costs.add_catch_up_pass(num_tokens, seconds)
        if self.cycle_check is not None:
            self.cycle_check.on_catch_up_pass(seconds)

    def draft_ended(self, num_draft_passes: int) -> None:
        """The per-token stop may end a step before its planned passes."""
        if self.cycle_check is not None:
            self.cycle_check.on_draft_passes_run(num_draft_passes,
                                                 self.token_stop.seconds_per_pass)

    def observe_cycle_wall_time(self, seconds: float) -> None:
        """The wall time since the last plan (called just before the next)."""
        if self.cycle_check is not None:
            self.cycle_check.on_wall_time(seconds)

    # -- verification --------------------------------------------------------
    def new_state(self) -> CostAwareState:
        return CostAwareState()

    def observe(
        self,
        state: CostAwareState,
        num_draft_tokens: int,
        num_accepted_tokens: int,
        batch: BatchView,
    ) -> CostAwareState:
        self._check_observation(num_draft_tokens, num_accepted_tokens)
        self.acceptance.observe(state, num_draft_tokens, num_accepted_tokens)
        self.probes.on_verified(state, num_draft_tokens, num_accepted_tokens,
                                batch.batch_size)
        # the rule's estimate, made before its labels train the model
        revision = (None if self.cycle_check is None
                    else self.token_stop.revision(state, num_draft_tokens))
        self.token_stop.learn(state, num_draft_tokens, num_accepted_tokens)
        if self.cycle_check is not None:
            # a ruled draft counts the tokens the rule expected of it: the
            # token model is calibrated against acceptance on its own, and
            # the clock's check of the costs is spared the noise of
            # acceptance (cycle_check)
            if revision is None:
                self.cycle_check.on_accepted(num_accepted_tokens)
            else:
                self.cycle_check.revise(revision.tokens, revision.seconds)
                self.cycle_check.on_accepted(revision.accepted_tokens)
        return state

    def observe_free_draft(self, state: CostAwareState, num_draft_tokens: int,
                           num_accepted_tokens: int) -> None:
        """One verification of a free draft (an n-gram's): its own rate
        learns, the draft model's does not (``free_drafts``)."""
        self._check_observation(num_draft_tokens, num_accepted_tokens)
        self.free_acceptance.observe(state.free_drafts, num_draft_tokens,
                                     num_accepted_tokens)

    def free_draft_lengths(self, states: list[CostAwareState], offers: Sequence[int],
                           batch: BatchView) -> list[int]:
        """Per request, the tokens of its free draft (``offers``: [num_reqs]
        tokens the lookup offers) to verify this step, 0 where the draft
        model's draft is worth more (``free_drafts``), weighed only where
        the step's plan without free drafts would draft the request. Before
        both cost fits have their samples the draft model drafts (warm-up)."""
        num_reqs = len(states)
        if not self.costs.ready:
            return [0] * num_reqs
        costs = self.costs.at(batch.num_scheduled_tokens, num_reqs)
        rates = self.acceptance.rates(states)
        scale = self._drafting_scale(num_reqs)
        model_plan = self._best_plan(costs, rates, batch, scale,
                                     self.free_drafting.at(num_reqs))
        return free_draft_lengths(costs, self.free_acceptance.rates(
            [s.free_drafts for s in states]), rates, offers, self.max_num_draft_tokens,
            model_drafts=[k > 0 for k in model_plan])

    def draft_on(self, states: list[CostAwareState], position: int,
                 token_probs: Sequence[float], active: Sequence[bool]) -> list[int | None]:
        return self.token_stop.draft_on(states, position, token_probs, active)

    def verification_details(self, state: CostAwareState, num_draft_tokens: int) -> dict:
        return self.token_stop.verification_details(state, num_draft_tokens)

    # -- planning -----------------------------------------------------------
    def next_num_draft_tokens(self, state: CostAwareState, batch: BatchView) -> int:
        return self.plan_batch([state], batch)[0]

    def plan_batch(self, states: list[CostAwareState], batch: BatchView) -> list[int]:
        """Every request's length for this step (0 = no draft), in the order
        of the module docstring."""
        num_reqs = len(states)
        no_probes = [False] * num_reqs
        # 1. the previous plan's cycle, as the clock measured it
        measured = None if self.cycle_check is None else self.cycle_check.close()
        self.probes.settle(measured)
        # 2. warm-up
        if not self.costs.ready:
            plan = [self.warmup_num_draft_tokens] * num_reqs
            self.token_stop.begin_draft(states)
            self.probes.advance(states, plan, no_probes)
            self.drafting.count(plan)
            self._planned = PlannedStep("warmup", plan, no_probes, batch, 0.0, 0.0, measured)
            return plan
        # 3. pricing a catch-up
        if batch.has_prefill and self.costs.catch_up_line(num_reqs) is None:
            plan = price_plan(batch.catch_up_tokens, num_reqs)
            self.prompt_chunks.step_planned(batch.has_prefill, plan)
            self.token_stop.begin_draft(states)
            self._planned = PlannedStep("price", plan, no_probes, batch, 0.0, 0.0, measured)
            return plan
        # 4. the plan
        rates = self.acceptance.rates(states)
        costs = self.costs.at(batch.num_scheduled_tokens, num_reqs)
        scale = self._drafting_scale(num_reqs)
        if batch.has_prefill:
            plan = self._prompt_step_plan(rates, batch, scale)
        else:
            plan = self._decode_step_plan(costs, rates, batch, scale)
        self.prompt_chunks.step_planned(batch.has_prefill, plan)
        self.drafting.count(plan)
        # 5. probes: none while a prompt chunk waits, none where even drafts
        # that are always right would not make the step draft (a catch-up
        # that holds the batch back under the pace rule stops them: what the
        # others would learn could not change this batch's plan), and none
        # for a request whose catch-up not even such a draft would repay
        # (probe_scheduler)
        deferred = batch.has_prefill and max(plan, default=0) == 0
        if deferred or not self.probes.any_due(states, plan) or (
                max(plan) == 0
                and max(self._best_plan(costs, [MAX_RATE] * num_reqs, batch, 1.0,
                                        self.free_drafting.at(num_reqs))) == 0):
            probe_limits = [0] * num_reqs
        else:
            probe_limits = probe_ceiling(costs, num_reqs, batch.catch_up_tokens,
                                         batch.remaining_tokens, batch.draft_limits,
                                         max_num_draft_tokens=self.max_num_draft_tokens,
                                         drafting_share=self.planned_drafting.at(num_reqs))
        probed = self.probes.add_probes(states, plan, max(probe_limits) > 0, costs, rates,
                                        batch.catch_up_tokens, probe_limits)
        self.probes.advance(states, plan, probed.probes)
        # 6. this plan's cycle, to be measured; not a cycle with free drafts,
        # whose verification the plan's prediction does not hold
        if self.cycle_check is not None and not any(batch.free_draft_tokens):
            self.cycle_check.open(num_reqs, max(probed.lengths, default=0),
                                  probed.predicted_tokens, probed.predicted_seconds)
        # 7. the per-token stop
        lengths = self._ruled_lengths(states, batch, rates, costs, scale, plan,
                                      probed.lengths)
        if batch.draft_limits:  # a ruled draft's cap included
            lengths = [min(k, limit) for k, limit in zip(lengths, batch.draft_limits)]
        # 8. the record
        kind = ("draft" if max(plan, default=0) > 0 else "probe" if any(probed.probes)
                else "skip")
        self._planned = PlannedStep(kind, probed.lengths, probed.probes, batch,
                                    probed.predicted_tokens, probed.predicted_seconds,
                                    measured)
        return lengths

    def _drafting_scale(self, num_reqs: int) -> float:
        """The clock's correction of a drafted plan at this batch size
        (``CycleCheck.drafting_scale``; 1.0 without the check)."""
        return 1.0 if self.cycle_check is None else self.cycle_check.drafting_scale(num_reqs)

    def _best_plan(self, costs: StepCosts, rates: list[float], batch: BatchView,
                   drafting_scale: float, drafting_share: float = 1.0,
                   free_plan: list[int] | None = None) -> list[int]:
        return best_plan(costs, rates, batch.catch_up_tokens, batch.remaining_tokens,
                         batch.draft_limits, max_num_draft_tokens=self.max_num_draft_tokens,
                         drafting_scale=drafting_scale, min_draft_gain=self.min_draft_gain,
                         drafting_share=drafting_share, free_plan=free_plan,
                         keep_pace=self.keep_pace)

    def _decode_step_plan(self, costs: StepCosts, rates: list[float], batch: BatchView,
                          drafting_scale: float) -> list[int]:
        """A decode step: the plan without catch-ups is a sample of ``f`` at
        this batch size, which spreads the catch-ups of the plan with them
        (``planner``)."""
        num_reqs = len(rates)
        free = best_plan(costs, rates, draft_limits=batch.draft_limits,
                         max_num_draft_tokens=self.max_num_draft_tokens,
                         drafting_scale=drafting_scale, min_draft_gain=self.min_draft_gain,
                         keep_pace=self.keep_pace)
        self.free_drafting.add(num_reqs, sum(k > 0 for k in free) / num_reqs)
        plan = free if not any(batch.catch_up_tokens) else self._best_plan(
            costs, rates, batch, drafting_scale, self.free_drafting.at(num_reqs), free)
        self.planned_drafting.add(num_reqs, sum(k > 0 for k in plan) / num_reqs)
        return plan

    def _prompt_step_plan(self, rates: list[float], batch: BatchView,
                          drafting_scale: float) -> list[int]:
        """A step with a prompt chunk: the plan of a decode step, if its gain
        beats the chunk's draft prefill weighed by the chance the request
        drafts later anyway (``prompt_chunks``: ``g > (1 - p) C``)."""
        num_reqs = len(rates)
        if self.prompt_chunks.waits(num_reqs):
            return [0] * num_reqs  # most requests do not draft later: wait
        # lengths as in a decode step: the first pass over one token each
        decode_costs = self.costs.at(num_reqs, num_reqs)
        plan = self._best_plan(decode_costs, rates, batch, drafting_scale,
                               self.free_drafting.at(num_reqs))
        if max(plan, default=0) == 0:
            return plan
        catch_up_line = self.costs.catch_up_line(num_reqs)
        assert catch_up_line is not None, "plan_batch prices catch-ups first"
        gain = draft_gain(decode_costs, rates, plan, batch.catch_up_tokens, drafting_scale)
        chunk_seconds = catch_up_line[1] * max(0, batch.num_scheduled_tokens - num_reqs)
        return (plan if self.prompt_chunks.drafts(gain, chunk_seconds, num_reqs)
                else [0] * num_reqs)

    def _ruled_lengths(self, states: list[CostAwareState], batch: BatchView,
                       rates: list[float], costs: StepCosts, drafting_scale: float,
                       plan: list[int], lengths: list[int]) -> list[int]:
        """The lengths the proposer drafts: in a decode step, a request that
        drafts for its own sake gets the cap (the plan's length where the
        drafter runs every planned pass), and the per-token stop ends its
        draft where the next token stops paying, priced at the rate the plan
        expects (``TokenPrices``)."""
        ruled = [k > 0 and not batch.has_prefill for k in plan]
        prices = None
        if any(ruled) and self.token_stop.enabled:
            tokens, seconds = predicted_step(costs, rates, plan, batch.catch_up_tokens)
            prices = TokenPrices(rate=drafting_scale * tokens / seconds,
                                 per_token=costs.per_token, per_pass=costs.later_pass)
        self.token_stop.begin_draft(states, prices, ruled, lengths, rates)
        if prices is None or not self._ruled_drafts_run_to_cap:
            return lengths
        return [self.max_num_draft_tokens if r else k for r, k in zip(ruled, lengths)]

    # -- explaining a step ------------------------------------------------------
    @property
    def last_decision(self) -> StepDecision | None:
        """What the last ``plan_batch`` decided and why; read it before the
        next one."""
        planned = self._planned
        if planned is None:
            return None
        num_reqs = len(planned.lengths)
        line = self.costs.catch_up_line(num_reqs)
        check = self.cycle_check
        return planned.decision(
            catch_up_seconds_per_token=None if line is None else line[1],
            drafting_share=self.drafting.share,
            drafting_scale=self._drafting_scale(num_reqs),
            informed=check is not None and check.is_informed(num_reqs),
            previous_cycle_seconds=None if check is None else check.last_seconds,
            step_costs=self.costs.coefficients(num_reqs))
