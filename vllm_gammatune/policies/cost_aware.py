"""Cost-aware draft lengths: the most generated tokens per second of engine time.

Neither paper weighs what a draft token costs; at batch 1 on a GPU verifying
one more token is nearly free, but as the batch grows (and on a CPU already at
batch 4) each draft token costs real target time, and fixed-K speculation
becomes slower than none. This policy chooses, every step and for every
request of the batch jointly, the draft lengths ``k_r`` (0 allowed) that
maximise expected tokens per second:

    value(k) = sum_r E_r(k_r),  E_r(k) = (1 - a_r^(k+1)) / (1 - a_r)
    cost(k)  = t_target(B + D) + [K > 0] * (t_draft(N + B) + (K - 1) * t_draft(B)
               + t_catch_up(sum of the drafting requests' missed positions,
                            each times its share ``catch_up_share``))

with ``B`` requests, ``D = sum_r k_r`` draft tokens, ``K = max_r k_r``, ``N``
the tokens the target processed this step (the draft's first pass runs over
them and one new token per request), and ``E_r`` the expected tokens a
verification of ``k`` draft tokens emits under the geometric acceptance model
with the request's own per-token acceptance rate ``a_r``. When every ``k_r``
is 0 the proposer skips the draft model for the step altogether, so the step
costs what a step without speculation costs; a request that later drafts
again first runs the draft over the positions it missed (its catch-up tokens,
charged to it here: the share of them its remaining steps leave to this one,
``catch_up_share``).

The joint choice is exact for each cap ``K``: with a linear target cost, the
ratio is maximised by Dinkelbach's iteration, where for a given ratio lambda
each request independently keeps its draft tokens while their marginal
expected gain ``a_r^j`` exceeds lambda times the marginal cost of a token (one
more verified position plus one more token in the next draft pass), which has
the closed form below; the best ``K`` in ``0..cap`` wins.

Acceptance: per request, decayed counts of accepted draft tokens ``S`` and of
verifications that ended in a rejection ``F`` give the maximum-likelihood rate
of a truncated geometric, ``a = S / (S + F)``, shrunk toward the rate of all
requests (``prior_weight`` pseudo-observations), so a new request starts from
what the engine has seen.

Probing: a request at length 0 learns nothing, so after ``probe_interval``
steps without drafting it drafts one token (only if some acceptance rate could
make drafting pay at the step's batch and costs: at a batch where even a
perfect draft loses, a probe could not change the decision and is not run) (with every other request that is
at least half-way due, so they share the draft pass); each further probe
without drafting in between doubles the interval, up to ``max_probe_interval``;
drafting for its own sake resets it. Probes that make a step draft which
otherwise would not are also held to a budget across the engine: the seconds
the model predicts they lose (their step's time minus what its expected
tokens would take at the rate of the step without them) may be at most
``probe_budget`` of the predicted engine time (decayed sums over about the
last 200 steps), counting the probe about to run; once such a step is
measured whole (``cycle_check``), its measured loss replaces the predicted
one, so probes the model thinks cheap but the clock does not are rationed
by the clock.
Without it every new request would restart probing at the base interval,
and where drafting never pays (a probe step can cost about one more target
step at a large batch) probing alone would cost a few percent of throughput.

Margin: a step drafts for its own sake only if the model, after the clock's
correction, predicts at least ``min_draft_gain`` (default 5%) more tokens per
second than not drafting. The linear costs, the geometric acceptance and the
measured correction each carry errors of a few percent, and a policy meant
never to be slower than no speculation should not draft on a predicted gain
smaller than its own error. Probes are not held to the margin (they are rationed by
the probe budget).

Prompt chunks: a step where some request's query is a prompt chunk
(``BatchView.has_prefill``) would, if it drafted, also prefill the draft over
the whole chunk, which the decode-step fit prices far too low (a pass over
741 prompt tokens priced like one over a few), and the batch the request
will decode in is not known yet: ``LLM.generate`` hands a batch's requests
to the engine one at a time, so its first step often holds only the first
prompt, at batch 1, where drafting pays, while the batch then decodes at 4,
where it does not (a batch of 4 that drafts just that once pays the
draft's prefill of a whole prompt for one drafted step). Left undrafted, the chunk's draft prefill becomes the
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
  earlier chunks, charged the chunk as a catch-up, have drafted. Starting
  at 1 would be self-fulfilling: with every chunk drafted no decode step has
  a catch-up to weigh, so a batch where drafting does not pay would draft on
  its decode steps too, keep ``p`` at 1 and pay the draft's prefill of every
  prompt.
- Below ``p = 1/2`` no chunk drafts, however short: ``g`` is priced at the
  prompt step's batch size, not the one the request decodes in: with ``p``
  near 0, the short first prompt of a batch would still draft once, at
  batch 1, and pay for it in the batch it then decodes in.
- While nothing has priced a catch-up ``C`` is unknown: the chunk drafts
  one token for every request with nothing to catch up, so that the draft's
  pass over it is timed (``catch_up_line``; once per engine).

Where drafting does not pay at the batch size requests decode in, ``p``
stays near 0 and the chunks wait; where decode steps draft even with a
catch-up to pay (batch 1), ``p`` rises toward 1 and prompt chunks draft
again. A step with a prompt chunk that does not draft runs no
probe either.

Checking the model against the clock: every plan's predicted tokens and
seconds are compared with what the step then measured (``cycle_check``), per
batch size, for steps that drafted and steps that did not; a drafted plan's
predicted tokens per second is multiplied by the measured ratio of the two
efficiencies before it is weighed against not drafting, so where the model
flatters drafting on a machine, measurement overrules it (probes are exempt,
so the measurement keeps coming).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from vllm_gammatune.policies.base import BatchView, DraftLengthPolicy
from vllm_gammatune.policies.cost_model import BatchLocalLinearCost, FixedLinearCost
from vllm_gammatune.policies.cycle_check import CycleCheck

#: Acceptance rates are kept inside this interval (a = 1 would make E infinite).
_MIN_RATE, _MAX_RATE = 0.01, 0.99
_DINKELBACH_ITERATIONS = 8
#: weight kept by the probe budget's sums per step (a window of ~200 steps)
_BUDGET_MEMORY = 0.995
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


@dataclass(frozen=True)
class _StepCosts:
    """The model's costs of one step (seconds), around its batch size."""

    target_now: float  # the target step without draft tokens
    per_token: float  # one more draft token (verification + next first pass)
    first_pass: float  # the draft's pass over the step's target tokens
    later_pass: float  # each further draft pass (one token per request)
    catch_up_base: float
    catch_up_per_token: float


@dataclass(frozen=True)
class StepDecision:
    """What one ``plan_batch`` decided and why (for traces and debugging).

    ``kind``: "warmup" (costs not measured yet), "skip" (no request drafts),
    "draft" (drafting for its own sake, probes may join), "probe" (only
    probes draft) or "price" (a prompt chunk drafted to price catch-ups).
    ``predicted_tokens`` / ``predicted_seconds``: the model's
    expectation of the chosen plan, before the measured correction
    ``drafting_scale`` (1.0 while ``informed`` is False: fewer than
    ``CycleCheck.min_cycles`` drafted cycles measured at this batch size).
    ``catch_up_tokens``: the missed positions of the requests that draft;
    ``catch_up_seconds_per_token``: the price of one (``catch_up_line``'s
    slope, None while no catch-up or prompt pass of the draft was timed);
    ``drafting_share``: the policy's share of recent steps that drafted.
    ``measured_tokens`` / ``measured_seconds``: the previous plan's cycle as
    the clock measured it (None if it was not measured whole);
    ``previous_cycle_seconds``: its seconds even when it was not (a batch
    change, a prefill chunk or more than ``OUTLIER_FACTOR`` times the
    prediction left it out of the check).
    """

    batch_size: int
    num_scheduled_tokens: int
    has_prefill: bool
    kind: str
    num_draft_tokens: int
    max_num_draft_tokens: int
    num_probes: int
    catch_up_tokens: int
    catch_up_seconds_per_token: float | None
    drafting_share: float
    predicted_tokens: float
    predicted_seconds: float
    drafting_scale: float
    informed: bool
    measured_tokens: int | None
    measured_seconds: float | None
    previous_cycle_seconds: float | None


@dataclass
class CostAwareState:
    #: decayed count of accepted draft tokens
    accepted: float = 0.0
    #: decayed count of verifications that ended in a rejected draft token
    rejections: float = 0.0
    #: steps since this request last drafted
    steps_since_draft: int = 0
    #: steps without drafting after which it probes
    probe_interval: int = 8
    #: True while the last draft was a probe
    probing: bool = False


class CostAwarePolicy(DraftLengthPolicy):
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
        check_cycles: bool = True,
        probe_budget: float = 0.01,
        min_draft_gain: float = 0.05,
    ):
        super().__init__(max_num_draft_tokens)
        if probe_interval < 1 or max_probe_interval < probe_interval:
            raise ValueError("need 1 <= probe_interval <= max_probe_interval")
        if not 0.0 < probe_budget <= 1.0:
            raise ValueError(f"probe_budget must be in (0, 1], got {probe_budget}")
        self.probe_budget = probe_budget
        if not 0.0 <= min_draft_gain < 1.0:
            raise ValueError(f"min_draft_gain must be in [0, 1), got {min_draft_gain}")
        self.min_draft_gain = min_draft_gain
        #: decayed sums of the predicted seconds that probes lost, and of
        #: all predicted step seconds (the budget's window)
        self._probe_seconds = 0.0
        self._engine_seconds = 0.0
        #: (predicted lost seconds, predicted seconds per token without the
        #: probes) of a step the probes made draft, until it is measured
        self._open_probe: tuple[float, float] | None = None
        self.probe_interval = probe_interval
        self.max_probe_interval = max_probe_interval
        self.memory = memory
        self.prior_weight = prior_weight
        self.warmup_num_draft_tokens = min(warmup_num_draft_tokens, max_num_draft_tokens)
        self.target_cost = target_cost or BatchLocalLinearCost()
        self.draft_cost = draft_cost or BatchLocalLinearCost()
        #: catch-up passes run over many positions per request, like a
        #: prefill, where a token costs far more than in a decode pass: they
        #: get their own fit (``catch_up_line``), which the draft's passes
        #: over prompt chunks also feed; the decode draft cost stands in when
        #: costs are fixed. Timed around the forward alone, they hold no idle
        #: gap: none is dropped as an outlier (a catch-up far larger than any
        #: before is exactly the sample the fit needs).
        self.catch_up_cost = (BatchLocalLinearCost(locality=0.0, drop_outliers=False)
                              if draft_cost is None else draft_cost)
        self.cycle_check = CycleCheck() if check_cycles else None
        # engine-wide decayed counts (the prior of new requests)
        self._accepted = 1.0
        self._rejections = 1.0
        #: decayed share of the decode steps right after a prompt chunk that
        #: drafted for their own sake (``p`` of ``_prompt_step_plan``)
        self._drafts_after_prompt = 0.0
        #: whether the last planned step had a prompt chunk
        self._after_prompt = False
        #: what the last ``plan_batch`` chose, as ``_decide`` got it (the
        #: ``StepDecision`` is built only when read: traces alone read it)
        self._last_step: tuple | None = None
        #: decayed share of recent steps that drafted for their own sake
        #: (warm-up included, probes not): the chance that a request that
        #: catches up now drafts on a later step (``catch_up_share``)
        self.drafting_share = 1.0

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

    def observe_cycle_wall_time(self, seconds: float) -> None:
        """The wall time since the last plan (called just before the next)."""
        if self.cycle_check is not None:
            self.cycle_check.on_wall_time(seconds)

    # -- acceptance ---------------------------------------------------------
    def new_state(self) -> CostAwareState:
        return CostAwareState(probe_interval=self.probe_interval)

    def acceptance_rate(self, state: CostAwareState) -> float:
        prior = self._accepted / (self._accepted + self._rejections)
        w = self.prior_weight
        rate = (state.accepted + w * prior) / (state.accepted + state.rejections + w)
        return min(_MAX_RATE, max(_MIN_RATE, rate))

    def observe(
        self,
        state: CostAwareState,
        num_draft_tokens: int,
        num_accepted_tokens: int,
        batch: BatchView,
    ) -> CostAwareState:
        self._check_observation(num_draft_tokens, num_accepted_tokens)
        rejected = 1.0 if num_accepted_tokens < num_draft_tokens else 0.0
        m = self.memory
        state.accepted = m * state.accepted + num_accepted_tokens
        state.rejections = m * state.rejections + rejected
        self._accepted = m * self._accepted + num_accepted_tokens
        self._rejections = m * self._rejections + rejected
        if self.cycle_check is not None:
            self.cycle_check.on_accepted(num_accepted_tokens)
        return state

    # -- planning -----------------------------------------------------------
    def next_num_draft_tokens(self, state: CostAwareState, batch: BatchView) -> int:
        return self.plan_batch([state], batch)[0]

    def plan_batch(self, states: list[CostAwareState], batch: BatchView) -> list[int]:
        """Every request's length for this step (0 = no draft); updates probing."""
        measured = None
        if self.cycle_check is not None:
            measured = self.cycle_check.close()  # the previous plan's cycle
        if self._open_probe is not None:
            # the last step probed: what it lost, measured, replaces the
            # prediction charged to the budget when it was planned
            predicted_lost, seconds_per_token = self._open_probe
            self._open_probe = None
            if measured is not None:
                lost = max(0.0, measured.seconds - measured.tokens * seconds_per_token)
                self._probe_seconds = max(0.0, self._probe_seconds + lost - predicted_lost)
        if not (self.target_cost.ready and self.draft_cost.ready):
            plan = [self.warmup_num_draft_tokens] * len(states)
            self._advance_probing(states, plan, [False] * len(states))
            self._count_drafting(plan)
            self._decide("warmup", plan, [False] * len(plan), batch, 0.0, 0.0, measured)
            return plan
        if batch.has_prefill and self.catch_up_line(len(states)) is None:
            # Nothing has priced a catch-up yet (the warm-up saw no prompt
            # pass: a server's first request may be a one-token "Hello"):
            # every request with nothing to catch up drafts one token, so the
            # draft's pass over this chunk is the price's first sample. Paid
            # once per engine; left unpriced, the next probe caught 16 new
            # requests up over 2,113 prompt tokens in 4.9 s, priced 0.2 s.
            catch_up = list(batch.catch_up_tokens) or [0] * len(states)
            plan = [0 if missed else 1 for missed in catch_up]
            self._after_prompt = True
            self._decide("price", plan, [False] * len(plan), batch, 0.0, 0.0, measured)
            return plan
        rates = [self.acceptance_rate(s) for s in states]
        if batch.has_prefill:
            plan = self._prompt_step_plan(states, batch, rates)
        else:
            plan = self.best_plan(states, batch, rates=rates)
            if self._after_prompt:
                m = _AFTER_PROMPT_MEMORY
                self._drafts_after_prompt = (m * self._drafts_after_prompt
                                             + (1.0 - m) * (max(plan, default=0) > 0))
        self._after_prompt = batch.has_prefill
        # a step whose prompt chunk waits drafts nothing, not even probes
        deferred = batch.has_prefill and max(plan, default=0) == 0
        # A probe is worth its draft pass only if some acceptance could make
        # drafting pay at this batch and these costs: if even a draft that is
        # always right would not, no probe can change the decision. (Searched
        # only on steps where a probe is due; by the model alone, so that a
        # measured correction cannot stop the measurements that correct it.)
        # A probe in a step that drafts anyway shares its passes; one that
        # makes the step draft must also fit the engine-wide budget, its own
        # predicted loss included.
        may_probe = not deferred and (max(plan) > 0 or (
            any(self._probe_due(s, k) for s, k in zip(states, plan))
            and max(self.best_plan(states, batch, rates=[_MAX_RATE] * len(states),
                                   drafting_scale=1.0)) > 0))
        probes = self._probe_mask(states, plan, may_probe)
        probed = [1 if probe else k for probe, k in zip(probes, plan)]
        tokens, seconds = self.predicted_step(rates, batch, probed)
        lost = 0.0
        if probed != plan:
            # the seconds the probes lose: their step's time minus what its
            # tokens would take at the rate of the plan without them
            base_tokens, base_seconds = self.predicted_step(rates, batch, plan)
            lost = max(0.0, seconds - tokens * base_seconds / base_tokens)
            if max(plan) == 0 and (self._probe_seconds + lost
                                   > self.probe_budget * (self._engine_seconds + seconds)):
                probes, probed, lost = [False] * len(plan), plan, 0.0
                tokens, seconds = base_tokens, base_seconds
            elif max(plan) == 0:
                self._open_probe = (lost, base_seconds / base_tokens)
        self._probe_seconds = _BUDGET_MEMORY * self._probe_seconds + lost
        self._engine_seconds = _BUDGET_MEMORY * self._engine_seconds + seconds
        self._advance_probing(states, plan, probes)
        self._count_drafting(plan)
        if self.cycle_check is not None:
            self.cycle_check.open(len(states), max(probed, default=0), tokens, seconds)
        kind = "draft" if max(plan, default=0) > 0 else "probe" if any(probes) else "skip"
        self._decide(kind, probed, probes, batch, tokens, seconds, measured)
        return probed

    def _count_drafting(self, plan: list[int]) -> None:
        m = _DRAFTING_SHARE_MEMORY
        self.drafting_share = m * self.drafting_share + (1.0 - m) * (max(plan, default=0) > 0)

    def _decide(self, kind, plan, probes, batch, tokens, seconds, measured) -> None:
        """Keep what ``plan_batch`` chose, for ``last_decision``."""
        self._last_step = (kind, plan, probes, batch, tokens, seconds, measured)

    @property
    def last_decision(self) -> StepDecision | None:
        """What the last ``plan_batch`` decided and why; read it before the
        next one (the catch-up price, shares and scale are read now, and
        nothing changes them in between)."""
        if self._last_step is None:
            return None
        kind, plan, probes, batch, tokens, seconds, measured = self._last_step
        num_reqs = len(plan)
        catch_up = list(batch.catch_up_tokens) or [0] * num_reqs
        check = self.cycle_check
        return StepDecision(
            batch_size=num_reqs, num_scheduled_tokens=batch.num_scheduled_tokens,
            has_prefill=batch.has_prefill, kind=kind, num_draft_tokens=sum(plan),
            max_num_draft_tokens=max(plan, default=0), num_probes=sum(probes),
            catch_up_tokens=sum(m for k, m in zip(plan, catch_up) if k),
            catch_up_seconds_per_token=(None if (line := self.catch_up_line(num_reqs)) is None
                                        else line[1]),
            drafting_share=self.drafting_share,
            predicted_tokens=tokens, predicted_seconds=seconds,
            drafting_scale=1.0 if check is None else check.drafting_scale(num_reqs),
            informed=check is not None and check.is_informed(num_reqs),
            measured_tokens=None if measured is None else measured.tokens,
            measured_seconds=None if measured is None else measured.seconds,
            previous_cycle_seconds=None if check is None else check.last_seconds)

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

    def expected_tokens(self, rate: float, num_draft_tokens: int) -> float:
        """E(k) = (1 - a^(k+1)) / (1 - a): tokens one verification emits."""
        return (1.0 - rate ** (num_draft_tokens + 1)) / (1.0 - rate)

    def catch_up_line(self, num_reqs: int) -> tuple[float, float] | None:
        """(base, per token) seconds of a catch-up pass: the catch-up fit
        once ready; before, its samples' seconds per token with no base
        (proportional: a line through one or two passes would extrapolate a
        pass of a few hundred tokens to thousands at a decode pass's slope);
        None before any catch-up or prompt pass of the draft was timed.

        The line from decode passes is no price for a catch-up: a decode
        pass over 2 or 17 tokens costs about the same on a CPU, so its slope
        prices a pass over thousands of prompt tokens more than ten times
        too low (``docs/cost-aware.md``). It stands in only while this is
        None, which is brief: until the costs are measured every step drafts,
        the first request's prompt included, and that pass is a sample here;
        if it was too short to be one, the next prompt chunk drafts to be
        one (``plan_batch``)."""
        fit = self.catch_up_cost
        if fit.ready:
            return fit.coefficients(num_reqs)
        rate = fit.seconds_per_token()
        return None if rate is None else (0.0, rate)

    def _step_costs(self, batch: BatchView, num_reqs: int) -> _StepCosts:
        scheduled = batch.num_scheduled_tokens or num_reqs
        t_base, t_slope = self.target_cost.coefficients(num_reqs)
        d_base, d_slope = self.draft_cost.coefficients(num_reqs)
        c_base, c_slope = (self.catch_up_line(num_reqs)
                           or self.draft_cost.coefficients(num_reqs))
        return _StepCosts(
            target_now=t_base + t_slope * num_reqs,
            # one more draft token: one more verified position now, one more
            # token in the draft's first pass of the next step
            per_token=t_slope + d_slope,
            first_pass=d_base + d_slope * (scheduled + num_reqs),
            later_pass=d_base + d_slope * num_reqs,
            catch_up_base=c_base, catch_up_per_token=c_slope)

    def predicted_step(self, rates: list[float], batch: BatchView,
                       plan: list[int]) -> tuple[float, float]:
        """(tokens, seconds) the model expects of ``plan``: what
        ``best_plan`` maximises the ratio of, before any measured correction."""
        num_reqs = len(plan)
        costs = self._step_costs(batch, num_reqs)
        tokens = sum(self.expected_tokens(rate, k) for rate, k in zip(rates, plan))
        seconds = costs.target_now
        if max(plan, default=0) > 0:
            catch_up = list(batch.catch_up_tokens) or [0] * num_reqs
            missed = sum(m for k, m in zip(plan, catch_up) if k)
            seconds += (costs.first_pass + (max(plan) - 1) * costs.later_pass
                        + costs.per_token * sum(plan)
                        + (costs.catch_up_base + costs.catch_up_per_token * missed
                           if missed else 0.0))
        return tokens, seconds

    def best_plan(self, states: list[CostAwareState], batch: BatchView,
                  rates: list[float] | None = None,
                  drafting_scale: float | None = None) -> list[int]:
        """The lengths maximising expected tokens per second (``rates``: the
        requests' acceptance rates, default their estimates;
        ``drafting_scale``: the factor on a drafted plan's tokens per second,
        default the measured one, ``CycleCheck.drafting_scale``)."""
        num_reqs = len(states)
        if rates is None:
            rates = [self.acceptance_rate(s) for s in states]
        if drafting_scale is None:
            drafting_scale = (1.0 if self.cycle_check is None
                              else self.cycle_check.drafting_scale(num_reqs))
        catch_up = list(batch.catch_up_tokens) or [0] * num_reqs
        catch_up_base_share = 1.0
        if any(catch_up):
            # a catch-up is paid once and serves every later draft of its
            # request: the plan weighs each request's share of it
            shares = [self.catch_up_share(rate, remaining, self.drafting_share)
                      for rate, remaining in
                      zip(rates, batch.remaining_tokens or [None] * num_reqs)]
            catch_up_base_share = max(share for share, missed in zip(shares, catch_up)
                                      if missed)
            catch_up = [missed * share for missed, share in zip(catch_up, shares)]
        costs = self._step_costs(batch, num_reqs)
        target_now = costs.target_now
        skip_ratio = best_ratio = num_reqs / target_now if target_now > 0 else math.inf
        best = [0] * num_reqs
        if math.isinf(best_ratio):
            return best
        # a drafted plan's tokens per second times the scale = its cost over it
        inflate = 1.0 / drafting_scale
        per_token = costs.per_token * inflate
        c_base = costs.catch_up_base * catch_up_base_share * inflate
        c_slope = costs.catch_up_per_token * inflate
        for cap in range(1, self.max_num_draft_tokens + 1):
            fixed = (target_now + costs.first_pass + (cap - 1) * costs.later_pass) * inflate
            ratio = best_ratio
            plan = best
            for _ in range(_DINKELBACH_ITERATIONS):
                lengths, value, cost = self._lengths_at(
                    ratio, rates, catch_up, cap, per_token, c_slope)
                catching_up = any(k and m for k, m in zip(lengths, catch_up))
                cost += fixed + (c_base if catching_up else 0.0)
                new_ratio = (num_reqs + value) / cost
                if new_ratio <= ratio * (1 + 1e-9):
                    break
                ratio, plan = new_ratio, lengths
            if ratio > best_ratio * (1 + 1e-9) and max(plan) > 0:
                best_ratio, best = ratio, plan
        if best_ratio < skip_ratio * (1.0 + self.min_draft_gain):
            return [0] * num_reqs
        return best

    @staticmethod
    def catch_up_share(rate: float, remaining_tokens: int | None,
                       drafting_share: float = 1.0) -> float:
        """The share of a request's catch-up its plan is charged now.

        The draft's pass over the positions a request missed is paid once and
        serves its later drafts, so a plan weighs it spread over the steps
        the request has left that will draft: at most ``remaining_tokens``
        (capped at ``CATCH_UP_HORIZON_TOKENS``) times ``1 - rate`` steps,
        since a draft with acceptance rate ``a`` emits at most ``1 / (1 - a)``
        tokens a step (the fewest steps: the largest share), times
        ``drafting_share``, the share of recent steps that drafted for their
        own sake. Unknown remaining tokens: all of it now.

        Without ``drafting_share`` a catch-up would be spread over steps
        that never come: where the engine rarely drafts, a new request
        (rated at the engine-wide acceptance rate) would catch up its whole
        prompt, draft on that one step and never again, and that step would
        cost several ordinary steps (``docs/cost-aware.md``). Where drafting pays on most steps
        (batch 1) the share is near 1 and nothing changes; where the engine
        rarely drafts, a catch-up is charged nearly whole.
        """
        if remaining_tokens is None:
            return 1.0
        steps = min(remaining_tokens, CATCH_UP_HORIZON_TOKENS) * (1.0 - rate) * drafting_share
        return 1.0 / max(1.0, steps)

    @staticmethod
    def _lengths_at(ratio, rates, catch_up, cap, per_token, catch_up_per_token):
        """Per request, the length maximising gain - ratio * cost (Dinkelbach)."""
        lengths, value, cost = [], 0.0, 0.0
        threshold = ratio * per_token  # a^j must exceed this
        for rate, missed in zip(rates, catch_up):
            if threshold >= rate:
                k = 0
            elif threshold <= 0.0:
                k = cap
            else:
                # largest k with rate^k > threshold
                k = min(cap, max(0, math.ceil(math.log(threshold) / math.log(rate)) - 1))
            gain = rate * (1.0 - rate ** k) / (1.0 - rate)
            extra = k * per_token + (missed * catch_up_per_token if k else 0.0)
            if k and gain - ratio * extra <= 0.0:
                k, gain, extra = 0, 0.0, 0.0
            lengths.append(k)
            value += gain
            cost += extra
        return lengths, value, cost

    @staticmethod
    def _probe_due(state: CostAwareState, num_draft_tokens: int) -> bool:
        return num_draft_tokens == 0 and state.steps_since_draft + 1 >= state.probe_interval

    def _probe_mask(self, states: list[CostAwareState], plan: list[int],
                    may_probe: bool) -> list[bool]:
        """Which requests probe (draft one token) this step: when one is due,
        every request at length 0 at least half-way due joins it."""
        if not (may_probe and any(self._probe_due(s, k) for s, k in zip(states, plan))):
            return [False] * len(plan)
        return [k == 0 and 2 * (s.steps_since_draft + 1) >= s.probe_interval
                for s, k in zip(states, plan)]

    def _advance_probing(self, states: list[CostAwareState], plan: list[int],
                         probes: list[bool]) -> None:
        """Per request: back off after a probe that did not pay, reset when
        drafting for its own sake, count the steps at length 0."""
        for state, k, probe in zip(states, plan, probes):
            if probe:
                if state.probing:  # the last probe did not pay: back off
                    state.probe_interval = min(2 * state.probe_interval,
                                               self.max_probe_interval)
                state.probing = True
                state.steps_since_draft = 0
            elif k > 0:
                state.probing = False
                state.probe_interval = self.probe_interval
                state.steps_since_draft = 0
            else:
                state.steps_since_draft += 1
