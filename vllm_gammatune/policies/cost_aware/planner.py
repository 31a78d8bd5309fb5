"""The plan of a step: the draft lengths that maximise expected tokens per second.

For ``B`` requests with acceptance rates ``a_r``, the plan ``k`` (one length
per request, 0 allowed) is worth and costs

    value(k) = sum_r E_r(k_r),  E_r(k) = (1 - a_r^(k+1)) / (1 - a_r)
    cost(k)  = t_target(B + D) + [K > 0] * (t_draft(N + B) + (K - 1) * t_draft(B)
               + t_catch_up(sum of the drafting requests' missed positions,
                            each times its share ``catch_up_share``))

with ``D = sum_r k_r`` draft tokens, ``K = max_r k_r``, ``N`` the tokens the
target processes this step (the draft's first pass runs over them and one new
token per request), and ``E_r`` the tokens a verification of ``k`` draft
tokens emits under the geometric acceptance model. When every ``k_r`` is 0
the proposer skips the draft model, so the step costs what a step without
speculation costs.

The joint choice is exact for each cap ``K``: with a linear target cost, the
ratio is maximised by Dinkelbach's iteration, where for a given ratio lambda
each request independently keeps its draft tokens while their marginal
expected gain ``a_r^j`` exceeds lambda times the marginal cost of a token
(one more verified position plus one more token in the next draft pass),
which has a closed form (``_lengths_at``); the best ``K`` in ``0..cap`` wins.

Margin: a plan drafts for its own sake only if, after the clock's correction
(``CycleCheck.drafting_scale``), it predicts at least ``min_draft_gain``
(default 5%) more tokens per second than not drafting. The linear costs, the
geometric acceptance and the measured correction each carry errors of a few
percent (on the 2-core CPU, fresh engines of one configuration differ by up
to 15% per step, and drafted cycles at batch 4 measure 3-7% better than
skipped ones while end to end the method runs 3% below no speculation), and
a policy meant never to be slower than no speculation does not draft on a
predicted gain smaller than its own error.

``StepPlanner`` is a part of ``CostAwarePolicy``: it reads the policy's cost
fits (``target_cost``, ``draft_cost``, ``catch_up_line``), its check against
the clock (``cycle_check``), its acceptance rates and its catch-up shares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from vllm_gammatune.policies.base import BatchView
from vllm_gammatune.policies.cost_aware.acceptance import expected_tokens
from vllm_gammatune.policies.cost_aware.state import CostAwareState

_DINKELBACH_ITERATIONS = 8


@dataclass(frozen=True)
class StepCosts:
    """The model's costs of one step (seconds), around its batch size."""

    target_now: float  # the target step without draft tokens
    per_token: float  # one more draft token (verification + next first pass)
    first_pass: float  # the draft's pass over the step's target tokens
    later_pass: float  # each further draft pass (one token per request)
    catch_up_base: float
    catch_up_per_token: float


class StepPlanner:
    """Predicts a plan's tokens and seconds, and finds the best plan."""

    def expected_tokens(self, rate: float, num_draft_tokens: int) -> float:
        """E(k) = (1 - a^(k+1)) / (1 - a): tokens one verification emits."""
        return expected_tokens(rate, num_draft_tokens)

    def _step_costs(self, batch: BatchView, num_reqs: int) -> StepCosts:
        scheduled = batch.num_scheduled_tokens or num_reqs
        t_base, t_slope = self.target_cost.coefficients(num_reqs)
        d_base, d_slope = self.draft_cost.coefficients(num_reqs)
        c_base, c_slope = (self.catch_up_line(num_reqs)
                           or self.draft_cost.coefficients(num_reqs))
        return StepCosts(
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
            # A catch-up only adds cost: where no request drafts without
            # one, none drafts with it.
            free = self.best_plan(states, replace(batch, catch_up_tokens=()), rates=rates,
                                  drafting_scale=drafting_scale)
            if max(free, default=0) == 0:
                return free
            # A catch-up is paid once and serves every later draft of its
            # request: a request whose drafting pays without its catch-up
            # keeps drafting after it, and is charged its share; any other
            # is charged the whole pass (catch_up_pricing).
            shares = [self.catch_up_share(rate, remaining) if k else 1.0
                      for rate, remaining, k in
                      zip(rates, batch.remaining_tokens or [None] * num_reqs, free)]
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
