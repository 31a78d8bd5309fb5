"""Cost-aware draft lengths: the most generated tokens per second of engine time.

Neither paper weighs what a draft token costs; at batch 1 on a GPU verifying
one more token is nearly free, but as the batch grows (and on a CPU already at
batch 4) each draft token costs real target time, and fixed-K speculation
becomes slower than none. ``CostAwarePolicy`` chooses, every step and for
every request of the batch jointly, the draft lengths (0 allowed) that
maximise expected tokens per second, from step costs the engine measures
while it serves. When every request plans 0 the proposer skips the draft
model for the step, so the step costs what a step without speculation costs.

Each step's plan (``plan_batch``) goes through, in order:

1. the check against the clock (``policies.cycle_check``): the previous
   plan's cycle, as measured, corrects the model's view of drafting
   (``drafting_scale``) and settles what its probes lost;
2. warm-up: until both cost fits have samples, every request drafts
   ``warmup_num_draft_tokens``;
3. pricing: a prompt chunk while nothing has priced a catch-up drafts to
   time the draft's pass over it (``catch_up_pricing``);
4. the plan: the lengths maximising expected tokens per second
   (``planner``), with each request's acceptance rate (``acceptance``) and
   its share of any catch-up; a step with a prompt chunk drafts only if the
   plan's gain beats the chunk's draft prefill (``catch_up_pricing``);
5. probes: requests at length 0 that are due draft one token, within the
   engine's probe budget (``probing``);
6. the per-token stop (``token_stop``): in a decode step, a request that
   drafts for its own sake may draft up to the cap, and after each token
   the rule ends its draft once the next token would not pay; each
   verification calibrates the rule's token acceptance
   (``token_acceptance``);
7. the record of the decision, for traces (``decision``).
"""

from __future__ import annotations

from vllm_gammatune.policies.base import BatchView, DraftLengthPolicy
from vllm_gammatune.policies.cost_aware.acceptance import AcceptanceEstimate
from vllm_gammatune.policies.cost_aware.catch_up_pricing import CatchUpPricing
from vllm_gammatune.policies.cost_aware.decision import DecisionRecord
from vllm_gammatune.policies.cost_aware.planner import StepPlanner
from vllm_gammatune.policies.cost_aware.probing import Probing
from vllm_gammatune.policies.cost_aware.state import CostAwareState
from vllm_gammatune.policies.cost_aware.token_stop import TokenPrices, TokenStop
from vllm_gammatune.policies.cost_model import BatchLocalLinearCost, FixedLinearCost
from vllm_gammatune.policies.cycle_check import CycleCheck


class CostAwarePolicy(StepPlanner, Probing, CatchUpPricing, DecisionRecord, TokenStop,
                      DraftLengthPolicy):
    """Per-step joint draft lengths maximising expected tokens per second.

    Args:
        max_num_draft_tokens: the cap (vLLM's num_speculative_tokens).
        probe_interval: steps at length 0 before a request probes with one token.
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
    """

    #: it plans from measured step costs, and may plan 0 for a whole step
    times_steps = True
    skips_drafts = True

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
    ):
        super().__init__(max_num_draft_tokens)
        if probe_interval < 1 or max_probe_interval < probe_interval:
            raise ValueError("need 1 <= probe_interval <= max_probe_interval")
        if not 0.0 < probe_budget <= 1.0:
            raise ValueError(f"probe_budget must be in (0, 1], got {probe_budget}")
        if not 0.0 <= min_draft_gain < 1.0:
            raise ValueError(f"min_draft_gain must be in [0, 1), got {min_draft_gain}")
        self.min_draft_gain = min_draft_gain
        self._init_probing(probe_interval, max_probe_interval, probe_budget)
        self.acceptance = AcceptanceEstimate(memory, prior_weight)
        self.warmup_num_draft_tokens = min(warmup_num_draft_tokens, max_num_draft_tokens)
        self.target_cost = target_cost or BatchLocalLinearCost()
        self.draft_cost = draft_cost or BatchLocalLinearCost()
        self._init_catch_up_pricing(draft_cost)
        self.cycle_check = CycleCheck() if check_cycles else None
        self._init_token_stop(token_stop)

    # -- step costs, fed by the proposer ------------------------------------
    def observe_target_step(self, num_scheduled_tokens: int, seconds: float,
                            batch_size: int = 1) -> None:
        self.target_cost.add(num_scheduled_tokens, seconds, batch_size)
        if self.cycle_check is not None:
            self.cycle_check.on_target_step(seconds, batch_size)

    def observe_draft_pass(self, num_tokens: int, seconds: float,
                           batch_size: int = 1) -> None:
        self.draft_cost.add(num_tokens, seconds, batch_size)
        if self.cycle_check is not None:
            self.cycle_check.on_draft_pass(seconds)

    def observe_catch_up_pass(self, num_tokens: int, seconds: float) -> None:
        self.catch_up_cost.add(num_tokens, seconds)
        if self.cycle_check is not None:
            self.cycle_check.on_catch_up_pass(seconds)

    def draft_ended(self, num_draft_passes: int) -> None:
        """The per-token stop may end a step before its planned passes."""
        if self.cycle_check is not None:
            prices = self._token_prices
            self.cycle_check.on_draft_passes_run(
                num_draft_passes, 0.0 if prices is None else prices.per_pass)

    def observe_cycle_wall_time(self, seconds: float) -> None:
        """The wall time since the last plan (called just before the next)."""
        if self.cycle_check is not None:
            self.cycle_check.on_wall_time(seconds)

    # -- acceptance ---------------------------------------------------------
    def new_state(self) -> CostAwareState:
        return CostAwareState(probe_interval=self.probe_interval)

    def acceptance_rate(self, state: CostAwareState) -> float:
        return self.acceptance.rate(state)

    def observe(
        self,
        state: CostAwareState,
        num_draft_tokens: int,
        num_accepted_tokens: int,
        batch: BatchView,
    ) -> CostAwareState:
        self._check_observation(num_draft_tokens, num_accepted_tokens)
        self.acceptance.observe(state, num_draft_tokens, num_accepted_tokens)
        # the rule's estimate, made before its labels train the model
        expected = self._revise_tokens(state, num_draft_tokens)
        self._learn_tokens(state, num_draft_tokens, num_accepted_tokens)
        if self.cycle_check is not None:
            # a ruled draft counts the tokens the rule expected of it: the
            # token model is calibrated against acceptance on its own, and
            # the clock's check of the costs is spared the noise of
            # acceptance (cycle_check)
            self.cycle_check.on_accepted(num_accepted_tokens if expected is None
                                         else expected)
        return state

    # -- planning -----------------------------------------------------------
    def next_num_draft_tokens(self, state: CostAwareState, batch: BatchView) -> int:
        return self.plan_batch([state], batch)[0]

    def plan_batch(self, states: list[CostAwareState], batch: BatchView) -> list[int]:
        """Every request's length for this step (0 = no draft); updates probing."""
        measured = None
        if self.cycle_check is not None:
            measured = self.cycle_check.close()  # the previous plan's cycle
        self._settle_open_probe(measured)
        if not (self.target_cost.ready and self.draft_cost.ready):
            plan = [self.warmup_num_draft_tokens] * len(states)
            self._begin_draft(states, [False] * len(states), None)
            self._advance_probing(states, plan, [False] * len(states))
            self._count_drafting(plan)
            self._decide("warmup", plan, [False] * len(plan), batch, 0.0, 0.0, measured)
            return plan
        if self._needs_price(batch, len(states)):
            plan = self._price_plan(states, batch)
            self._begin_draft(states, [False] * len(states), None)
            self._decide("price", plan, [False] * len(plan), batch, 0.0, 0.0, measured)
            return plan
        rates = [self.acceptance_rate(s) for s in states]
        if batch.has_prefill:
            plan = self._prompt_step_plan(states, batch, rates)
        else:
            plan = self.best_plan(states, batch, rates=rates)
            self._note_decode_plan(plan)
        self._after_prompt = batch.has_prefill
        # a step whose prompt chunk waits drafts nothing, not even probes
        deferred = batch.has_prefill and max(plan, default=0) == 0
        probes, probed, tokens, seconds = self._add_probes(states, batch, rates, plan,
                                                           deferred)
        self._advance_probing(states, plan, probes)
        self._count_drafting(plan)
        if self.cycle_check is not None:
            self.cycle_check.open(len(states), max(probed, default=0), tokens, seconds)
        kind = "draft" if max(plan, default=0) > 0 else "probe" if any(probes) else "skip"
        self._decide(kind, probed, probes, batch, tokens, seconds, measured)
        return self._ruled_plan(states, batch, rates, plan, probed)

    def _ruled_plan(self, states: list[CostAwareState], batch: BatchView,
                    rates: list[float], plan: list[int], probed: list[int]) -> list[int]:
        """The lengths the proposer drafts: in a decode step, a request that
        drafts for its own sake gets the cap, and the per-token stop
        (``token_stop``) ends its draft where the next token stops paying,
        priced at the rate the plan expects (``TokenPrices``)."""
        ruled = [k > 0 and not batch.has_prefill for k in plan]
        prices = None
        if any(ruled) and self.token_stop:
            tokens, seconds = self.predicted_step(rates, batch, plan)
            scale = (1.0 if self.cycle_check is None
                     else self.cycle_check.drafting_scale(len(states)))
            costs = self._step_costs(batch, len(states))
            prices = TokenPrices(rate=scale * tokens / seconds, per_token=costs.per_token,
                                 per_pass=costs.later_pass)
        self._begin_draft(states, ruled, prices)
        if prices is None:
            return probed
        for state, governed, rate, k in zip(states, ruled, rates, probed):
            if governed:
                state.planned_length = k
                state.planned_tokens = self.expected_tokens(rate, k)
        return [self.max_num_draft_tokens if r else k for r, k in zip(ruled, probed)]
