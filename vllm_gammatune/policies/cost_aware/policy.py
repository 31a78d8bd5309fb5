"""Cost-aware draft lengths: the most generated tokens per second of engine time.

``CostAwarePolicy`` chooses, every step and for every request of the batch
jointly, the draft lengths (0 allowed) that maximise expected tokens per
second, from step costs the engine measures while it serves. When every
request plans 0 the drafter skips the draft model for the step. Why each
rule: ``docs/cost-aware.md``.

The policy owns its parts and passes each what it needs (the package's
``__init__`` lists them); how each kind of step is planned is
``step_plans``.

Each step's plan (``plan_batch``) goes through, in order:

1. warm-up: until both cost fits have samples, every request drafts
   ``warmup_num_draft_tokens``;
2. pricing: a prompt chunk while nothing has priced a catch-up drafts to
   time the draft's pass over it (``catch_ups.price_plan``);
3. the plan: the lengths maximising expected tokens per second, drafted
   only if every request that can draft keeps pace (``step_plans``);
4. probes: requests at length 0 that are due draft one token, within the
   engine's probe budget;
5. the per-token stop: in a decode step, a request that drafts for its own
   sake may draft up to the cap, until its next token would not pay (off
   for a drafter that keeps every pass it runs, ``adapt_to_drafter``);
6. the record of the decision, for traces (``decision``).
"""

from __future__ import annotations

from collections.abc import Collection, MutableMapping, Sequence

from vllm_gammatune.policies.base import BatchView, DraftLengthPolicy
from vllm_gammatune.policies.contracts import (
    CostObserver,
    DrafterTraits,
    ExplainsSteps,
    FreeDraftPlanner,
    TokenRule,
)
from vllm_gammatune.policies.cost_aware.ablation import ablated_parts
from vllm_gammatune.policies.cost_aware.acceptance_rates import AcceptanceRates
from vllm_gammatune.policies.cost_aware.catch_ups import CatchUpShares, price_plan
from vllm_gammatune.policies.cost_aware.decision import (
    DraftingShare,
    PlannedStep,
    StepDecision,
)
from vllm_gammatune.policies.cost_aware.free_drafts import free_draft_lengths
from vllm_gammatune.policies.cost_aware.linear_costs import FixedLinearCost
from vllm_gammatune.policies.cost_aware.planner import padding_is_free, predicted_step
from vllm_gammatune.policies.cost_aware.probe_scheduler import ProbeScheduler
from vllm_gammatune.policies.cost_aware.prompt_chunks import PromptChunks
from vllm_gammatune.policies.cost_aware.request_state import CostAwareState
from vllm_gammatune.policies.cost_aware.step_costs import CostFits, StepCosts
from vllm_gammatune.policies.cost_aware.step_plans import PlanRules
from vllm_gammatune.policies.cost_aware.token_stop import TokenPrices, TokenStop
from vllm_gammatune.policies.observation import (
    DraftSource,
    StepObservation,
    Timing,
    Verification,
)


class CostAwarePolicy(DraftLengthPolicy, TokenRule, CostObserver, FreeDraftPlanner,
                      ExplainsSteps):
    """Per-step joint draft lengths maximising expected tokens per second.

    A ``TokenRule`` whether or not its per-token stop is on: the token
    probabilities calibrate the stop's acceptance model and feed traces.

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
        probe_budget: the share of predicted engine time that probes may lose
            in steps that would not draft otherwise (1.0: no limit).
        min_draft_gain: a step drafts (beyond probes) only if its predicted
            tokens per second beat not drafting by at least this fraction.
        token_stop: the per-token stop (``token_stop``); off, a request
            drafts the length the step plan gave it.
        keep_pace: a step drafts only if no request that can draft goes
            slower for it (``planner``, "Pace"); off, the batch's rate decides.
        ablate: parts switched off for measurement (``ablation``).
    """

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
        probe_budget: float = 0.01,
        min_draft_gain: float = 0.05,
        token_stop: bool = True,
        keep_pace: bool = True,
        ablate: Collection[str] = (),
    ):
        super().__init__(max_num_draft_tokens)
        self.ablated = ablated_parts(ablate)
        if not 0.0 <= min_draft_gain < 1.0:
            raise ValueError(f"min_draft_gain must be in [0, 1), got {min_draft_gain}")
        self.min_draft_gain = min_draft_gain
        self.keep_pace = keep_pace
        self.rules = PlanRules(max_num_draft_tokens, min_draft_gain, keep_pace, self.ablated)
        self.warmup_num_draft_tokens = min(warmup_num_draft_tokens, max_num_draft_tokens)
        self.costs = CostFits(target_cost, draft_cost)
        if "catch_up_pricing" in self.ablated:
            self.costs.without_catch_ups()
        prior_weight = 0.0 if "shrinkage" in self.ablated else prior_weight
        self.acceptance = AcceptanceRates(memory, prior_weight)
        #: the acceptance of free drafts (an n-gram's), per request and
        #: engine-wide, apart from the draft model's (``free_drafts``)
        self.free_acceptance = AcceptanceRates(memory, prior_weight)
        self.probes = ProbeScheduler(probe_interval, max_probe_interval, probe_budget)
        self.prompt_chunks = PromptChunks()
        self.catch_up_shares = CatchUpShares()
        self.token_stop = TokenStop(token_stop, learns="token_model" not in self.ablated)
        self.drafting = DraftingShare()
        #: what the last ``plan_batch`` chose (``last_decision``), and the
        #: step the next plan is of (``StepObservation.step``)
        self._planned: PlannedStep | None = None
        self._step = 0

    def adapt_to_drafter(self, traits: DrafterTraits) -> None:
        """A drafter without early exit pays for every planned pass and
        keeps every token they produce, so the per-token stop decides
        nothing there: off, each draft gets the plan's length; a drafter
        without a draft KV cache has no catch-up to price
        (``CostFits.without_catch_ups``)."""
        if traits.runs_every_planned_pass:
            self.token_stop.enabled = False
        if not traits.keeps_draft_kv:
            self.costs.without_catch_ups()

    def pads_skipped_step(self, num_reqs: int, num_draft_tokens: int) -> bool:
        return self.costs.ready and padding_is_free(
            *self.costs.target.coefficients(num_reqs), num_reqs, num_draft_tokens)

    # -- what the engine observed -----------------------------------------------
    def observe_step(self, observation: StepObservation,
                     states: MutableMapping[str, CostAwareState]) -> None:
        """The verifications, then each measured cycle's timings, drafting
        before target, in the order they happened (``policies.observation``)."""
        self._step = observation.step
        super().observe_step(observation, states)
        for cycle in observation.cycles:
            self.observe_costs(cycle.drafting)
            self.observe_costs(cycle.target)

    def observe_costs(self, timings: Sequence[Timing]) -> None:
        """Each timing feeds its fit."""
        self.costs.feed(timings)

    def new_state(self) -> CostAwareState:
        return CostAwareState()

    def observe(self, state: CostAwareState, verification: Verification) -> CostAwareState:
        num_draft_tokens = verification.num_draft_tokens
        num_accepted_tokens = verification.num_accepted_tokens
        if verification.source is DraftSource.FREE:
            # a free draft's rate learns, the draft model's does not (``free_drafts``)
            self.free_acceptance.observe(state.free_drafts, num_draft_tokens,
                                         num_accepted_tokens)
            return state
        self.acceptance.observe(state.acceptance, num_draft_tokens, num_accepted_tokens)
        self.probes.on_verified(state.probes, num_draft_tokens, num_accepted_tokens,
                                verification.num_reqs)
        self.token_stop.learn(state.token_rule, verification.step, num_draft_tokens,
                              num_accepted_tokens)
        return state

    # -- free drafts, per-token decisions ------------------------------------------
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
        rates = self._rates(states)
        model_plan = self.rules.best(costs, rates, batch,
                                     self.catch_up_shares.free_drafting.at(num_reqs))
        return free_draft_lengths(costs, self.free_acceptance.rates(
            [s.free_drafts for s in states]), rates, offers, self.max_num_draft_tokens,
            model_drafts=[k > 0 for k in model_plan])

    def draft_on(self, states: list[CostAwareState], position: int,
                 token_probs: Sequence[float], active: Sequence[bool]) -> list[int | None]:
        return self.token_stop.draft_on(states, position, token_probs, active)

    # -- planning -----------------------------------------------------------
    def next_num_draft_tokens(self, state: CostAwareState, batch: BatchView) -> int:
        return self.plan_batch([state], batch)[0]

    def plan_batch(self, states: list[CostAwareState], batch: BatchView) -> list[int]:
        """Every request's length for this step (0 = no draft), in the order
        of the module docstring."""
        num_reqs = len(states)
        no_probes = [False] * num_reqs
        probe_records = [s.probes for s in states]
        # 1. warm-up
        if not self.costs.ready:
            plan = [self.warmup_num_draft_tokens] * num_reqs
            self.token_stop.begin_draft(states, self._step)
            self.probes.advance(probe_records, plan, no_probes)
            self.drafting.count(plan)
            return self._decided("warmup", plan, plan, no_probes, batch)
        # 2. pricing a catch-up
        if batch.has_prefill and self.costs.catch_up_line(num_reqs) is None:
            plan = price_plan(batch.catch_up_tokens, num_reqs)
            self.prompt_chunks.step_planned(batch.has_prefill, plan)
            self.token_stop.begin_draft(states, self._step)
            return self._decided("price", plan, plan, no_probes, batch)
        # 3. the plan
        rates = self._rates(states)
        costs = self.costs.at(batch.num_scheduled_tokens, num_reqs)
        if batch.has_prefill:
            plan = self.rules.prompt_step(self.costs, rates, batch, self.prompt_chunks,
                                          self.catch_up_shares)
        else:
            plan = self.rules.decode_step(costs, rates, batch, self.catch_up_shares)
        self.prompt_chunks.step_planned(batch.has_prefill, plan)
        self.drafting.count(plan)
        # 4. probes (``probe_scheduler``)
        limits = self.rules.probe_limits(self.probes, probe_records, plan, costs, batch,
                                         self.catch_up_shares)
        probed = self.probes.add_probes(probe_records, plan, max(limits) > 0, costs, rates,
                                        batch.catch_up_tokens, limits)
        self.probes.advance(probe_records, plan, probed.probes)
        # 5. the per-token stop
        lengths = self._ruled_lengths(states, batch, rates, costs, plan, probed.lengths)
        if batch.draft_limits:  # a ruled draft's cap included
            lengths = [min(k, limit) for k, limit in zip(lengths, batch.draft_limits)]
        # 6. the record
        kind = ("draft" if max(plan, default=0) > 0 else "probe" if any(probed.probes)
                else "skip")
        return self._decided(kind, lengths, probed.lengths, probed.probes, batch,
                             probed.predicted_tokens, probed.predicted_seconds)

    def _decided(self, kind: str, lengths: list[int], planned: list[int],
                 probes: list[bool], batch: BatchView, predicted_tokens: float = 0.0,
                 predicted_seconds: float = 0.0) -> list[int]:
        """Every branch of ``plan_batch`` ends here: the decision is kept for
        ``last_decision`` and the drafter gets ``lengths``."""
        self._planned = PlannedStep(kind, planned, probes, batch, predicted_tokens,
                                    predicted_seconds)
        return lengths

    def _rates(self, states: list[CostAwareState]) -> list[float]:
        """[num_reqs] the draft model's acceptance rate of each request."""
        return self.acceptance.rates([s.acceptance for s in states])

    def _ruled_lengths(self, states: list[CostAwareState], batch: BatchView,
                       rates: list[float], costs: StepCosts, plan: list[int],
                       lengths: list[int]) -> list[int]:
        """The lengths the drafter drafts: in a decode step, a request that
        drafts for its own sake gets the cap, and the per-token stop ends its
        draft where the next token stops paying, priced at the rate the plan
        expects (``TokenPrices``)."""
        ruled = [k > 0 and not batch.has_prefill for k in plan]
        prices = None
        if any(ruled) and self.token_stop.enabled:
            tokens, seconds = predicted_step(costs, rates, plan, batch.catch_up_tokens)
            prices = TokenPrices(rate=tokens / seconds, per_token=costs.per_token,
                                 per_pass=costs.later_pass)
        self.token_stop.begin_draft(states, self._step, prices, ruled)
        if prices is None:
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
        return planned.decision(
            catch_up_seconds_per_token=None if line is None else line[1],
            drafting_share=self.drafting.share,
            previous_cycle_seconds=self.costs.last_cycle_seconds,
            step_costs=self.costs.coefficients(num_reqs))

    def verification_details(self, state: CostAwareState,
                             verification: Verification) -> dict:
        return self.token_stop.verification_details(state.token_rule, verification.step,
                                                    verification.num_draft_tokens)
