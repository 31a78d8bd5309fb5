"""The plan of a step: the draft lengths that maximise expected tokens per second.

For ``B`` requests with acceptance rates ``a_r``, the plan ``k`` (one length
per request, 0 allowed) is worth and costs

    value(k) = sum_r E_r(k_r),  E_r(k) = (1 - a_r^(k+1)) / (1 - a_r)
    cost(k)  = t_target(B + D) + [K > 0] * (t_draft(N + B) + (K - 1) * t_draft(B)
               + t_catch_up(sum of the drafting requests' missed positions,
                            each times its share ``catch_up_share``))

with ``D = sum_r k_r``, ``K = max_r k_r``, ``N`` the tokens the target
processes this step and ``E_r`` the tokens a verification of ``k`` draft
tokens emits under the geometric acceptance model. All ``k_r`` 0: the draft
model is skipped and the step costs what one without speculation costs.

For each cap ``K`` the ratio is maximised exactly by Dinkelbach's iteration:
at ratio lambda each request keeps its draft tokens while their marginal
gain ``a_r^j`` exceeds lambda times a token's marginal cost, in closed form
(``_lengths_at``); the best ``K`` in ``0..cap`` wins.

- Margin: a plan drafts for its own sake only if it predicts
  ``min_draft_gain`` more tokens per second than not drafting (the models'
  error is that size).
- Catch-ups: a plan is charged the share ``1 / S`` of a request's catch-up
  (``catch_ups.catch_up_share``), ``S = f R / (f E + 1 - f)``,
  ``E = min(1 / (1 - a), K + 1)``, ``R`` its remaining tokens, ``f`` the
  share of steps at this batch size that draft were nothing to catch up
  (``drafting_share``); only for requests that would draft without their
  catch-up; the others pay theirs whole.
- Pace (``keep_pace``): a plan drafts only if every request that can draft
  keeps pace, ``E_r(k_r) >= seconds_r / t_target(B)`` (``_paced``), with
  ``seconds_r`` the step as ``r`` waits through it (its own catch-up at its
  share, the others' whole); a lagging draft is lengthened to the shortest
  that keeps pace, a cap where none does is not taken.

Why each rule: ``docs/cost-aware.md``, "The decision" and "Length 0 skips
the draft model". Pure functions of the step's costs (``StepCosts``), the
requests' rates and catch-ups; ``[num_reqs]`` lists, in batch order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from vllm_gammatune.policies.cost_aware.acceptance_rates import MAX_RATE, expected_tokens
from vllm_gammatune.policies.cost_aware.catch_ups import catch_up_share
from vllm_gammatune.policies.cost_aware.step_costs import StepCosts

_DINKELBACH_ITERATIONS = 8
#: padding a step costs next to nothing below this share of the step
PADDING_SHARE = 0.05


def predicted_step(costs: StepCosts, rates: Sequence[float], plan: Sequence[int],
                   catch_up_tokens: Sequence[int] = ()) -> tuple[float, float]:
    """(tokens, seconds) the model expects of ``plan``: what ``best_plan``
    maximises the ratio of, before any measured correction.
    ``catch_up_tokens``: [num_reqs] missed positions, () for none."""
    tokens = sum(expected_tokens(rate, k) for rate, k in zip(rates, plan))
    seconds = costs.target_now
    if max(plan, default=0) > 0:
        missed = sum(m for k, m in zip(plan, catch_up_tokens) if k)
        seconds += (costs.first_pass + (max(plan) - 1) * costs.later_pass
                    + costs.per_token * sum(plan)
                    + (costs.catch_up_base + costs.catch_up_per_token * missed
                       if missed else 0.0))
    return tokens, seconds


def padding_is_free(target_base: float, target_slope: float, num_reqs: int,
                    num_draft_tokens: int) -> bool:
    """Whether verifying ``num_draft_tokens`` more positions per request
    costs at most ``PADDING_SHARE`` of a step of one token per request, by
    the target's line (``target_base`` + ``target_slope`` x tokens): a GPU
    at small batch, where a padded step replays a FULL graph; never the
    CPU, whose verification grows with every token (``docs/cuda.md``,
    "A step where no request drafts")."""
    extra = target_slope * num_reqs * num_draft_tokens
    return extra <= PADDING_SHARE * (target_base + target_slope * num_reqs)


def draft_gain(decode_costs: StepCosts, rates: Sequence[float], plan: Sequence[int],
               catch_up_tokens: Sequence[int]) -> float:
    """``g``: the seconds the plan's expected tokens save at the rate of not
    drafting, net of its draft passes."""
    tokens, seconds = predicted_step(decode_costs, rates, plan, catch_up_tokens)
    base_tokens, base_seconds = predicted_step(decode_costs, rates, [0] * len(plan),
                                               catch_up_tokens)
    return tokens * base_seconds / base_tokens - seconds


def best_plan(costs: StepCosts, rates: Sequence[float], catch_up_tokens: Sequence[int] = (),
              remaining_tokens: Sequence[int] = (), draft_limits: Sequence[int] = (), *,
              max_num_draft_tokens: int,
              min_draft_gain: float, drafting_share: float = 1.0,
              free_plan: Sequence[int] | None = None, keep_pace: bool = False) -> list[int]:
    """The lengths maximising expected tokens per second, 0 for every request
    unless the best plan beats not drafting by ``min_draft_gain``.

    Args:
        rates: [num_reqs] acceptance rates.
        catch_up_tokens: [num_reqs] missed positions, () for none.
        remaining_tokens: [num_reqs] tokens each may still generate, () if
            unknown (a catch-up is then charged whole).
        draft_limits: [num_reqs] the most draft tokens each request's
            drafter can offer (``BatchView.draft_limits``), () for the cap.
        drafting_share: ``f``, the share of steps at this batch size in
            which requests would draft were nothing to catch up (module
            docstring; 1.0: every remaining step).
        free_plan: [num_reqs] this step's plan without catch-ups, if the
            caller has it (None: found here when there are catch-ups).
        keep_pace: draft only plans in which every request that can draft
            expects at least the tokens per second it would get were the step
            not drafted (module docstring, "Pace").
    """
    num_reqs = len(rates)
    catch_up = list(catch_up_tokens) or [0] * num_reqs
    missed_tokens = catch_up
    catch_up_base_share = 1.0
    if any(catch_up):
        # A catch-up only adds cost: where no request drafts without one,
        # none drafts with it.
        free = list(free_plan) if free_plan is not None else best_plan(
            costs, rates, draft_limits=draft_limits,
            max_num_draft_tokens=max_num_draft_tokens,
            min_draft_gain=min_draft_gain,
            keep_pace=keep_pace)
        if max(free, default=0) == 0:
            return free
        # A catch-up is paid once and serves every later draft of its
        # request: a request whose drafting pays without its catch-up drafts
        # on a share of its later steps, and is charged its share of the
        # pass; any other is charged the whole pass.
        shares = [catch_up_share(rate, remaining, max_num_draft_tokens, drafting_share)
                  if k else 1.0
                  for rate, remaining, k in
                  zip(rates, remaining_tokens or [None] * num_reqs, free)]
        catch_up_base_share = max(share for share, missed in zip(shares, catch_up)
                                  if missed)
        catch_up = [missed * share for missed, share in zip(catch_up, shares)]
    target_now = costs.target_now
    skip_ratio = best_ratio = num_reqs / target_now if target_now > 0 else math.inf
    best = [0] * num_reqs
    if math.isinf(best_ratio):
        return best
    per_token = costs.per_token
    c_base_whole = costs.catch_up_base
    c_base = c_base_whole * catch_up_base_share
    c_slope = costs.catch_up_per_token
    limits = list(draft_limits) or [max_num_draft_tokens] * num_reqs
    longest = min(max_num_draft_tokens, max(limits, default=0))
    # taken once a plan: the search below reads them for every request, cap
    # and iteration
    log_rates = [math.log(rate) for rate in rates]
    gains = [[accepted_gain(rate, k) for k in range(min(longest, limit) + 1)]
             for rate, limit in zip(rates, limits)]
    for cap in range(1, longest + 1):
        fixed = target_now + costs.first_pass + (cap - 1) * costs.later_pass
        tops = [min(cap, limit) for limit in limits]
        ratio, plan = best_ratio, best
        for _ in range(_DINKELBACH_ITERATIONS):
            lengths, value, cost, catching_up = _lengths_at(
                ratio, rates, log_rates, gains, catch_up, tops, per_token, c_slope)
            cost += fixed + (c_base if catching_up else 0.0)
            new_ratio = (num_reqs + value) / cost
            if new_ratio <= ratio * (1 + 1e-9):
                break
            ratio, plan = new_ratio, lengths
        if keep_pace and plan is not best:
            paced = _paced(plan, fixed, rates, catch_up, missed_tokens, tops,
                           target_now, per_token, c_slope, c_base_whole, c_base)
            if paced is None:
                continue
            plan, value, cost = paced
            ratio = (num_reqs + value) / cost
        if ratio > best_ratio * (1 + 1e-9) and max(plan) > 0:
            best_ratio, best = ratio, plan
    if best_ratio < skip_ratio * (1.0 + min_draft_gain):
        return [0] * num_reqs
    return best


def _paced(lengths: list[int], fixed: float, rates: Sequence[float],
           catch_up: Sequence[float], missed: Sequence[int], tops: Sequence[int],
           target_now: float, per_token: float,
           catch_up_per_token: float, catch_up_base: float,
           charged_base: float) -> tuple[list[int], float, float] | None:
    """``lengths`` with each request that lags raised to the shortest draft
    that keeps its pace: ``E_r(k_r) >= seconds_r / target_now``, the tokens
    the step's time would give it without drafting, in the seconds of
    ``best_plan``. ``seconds_r`` is the step as request ``r`` waits
    through it: its own catch-up at its share (``catch_up``: [num_reqs]
    charged tokens), an investment in its later drafts, and every other
    drafting request's whole (``missed``: [num_reqs] tokens; the base whole
    too, ``catch_up_base`` against the ``charged_base``), time it only waits.
    Each raise lengthens the step, so the test repeats until every request
    keeps pace; None if one cannot within its top (``tops``: [num_reqs] the
    step's cap or its own limit, the smaller). A
    request whose drafter offers nothing (limit 0) is not held to it: no plan
    of this step can speed it up.

    Returns:
        (lengths, accepted tokens expected, cost) of the paced plan, the cost
        as ``best_plan`` charges it.
    """
    lengths = list(lengths)
    # constant over the raises: what each request waits of its catch-up, its top
    waited = [catch_up_per_token * (m - c) for m, c in zip(missed, catch_up)]
    others_base = catch_up_base - charged_base
    while True:
        catchers = [k > 0 and m > 0 for k, m in zip(lengths, missed)]
        num_catchers = sum(catchers)
        cost = (fixed + per_token * sum(lengths)
                + (charged_base if num_catchers else 0.0)
                + catch_up_per_token * sum(c for k, c in zip(lengths, catch_up) if k))
        all_waited = sum(w for w, k in zip(waited, lengths) if k)
        raised = False
        for r, (rate, k, top) in enumerate(zip(rates, lengths, tops)):
            if top == 0:
                continue
            seconds = (cost + all_waited - (waited[r] if k else 0.0)
                       + (others_base if num_catchers - catchers[r] > 0 else 0.0))
            need = seconds / target_now  # tokens it must expect of the step
            if expected_tokens(rate, k) >= need:
                continue
            k_paced = next((j for j in range(k + 1, top + 1)
                            if expected_tokens(rate, j) >= need), None)
            if k_paced is None:
                return None
            lengths[r] = k_paced
            raised = True
            break  # the step's cost changed: test everyone again
        if not raised:
            value = sum(accepted_gain(rate, k) for rate, k in zip(rates, lengths))
            return lengths, value, cost


def probe_ceiling(costs: StepCosts, num_reqs: int, catch_up_tokens: Sequence[int] = (),
                  remaining_tokens: Sequence[int] = (), draft_limits: Sequence[int] = (), *,
                  max_num_draft_tokens: int, drafting_share: float = 1.0) -> list[int]:
    """Per request, the length at which a draft that is always right
    (``MAX_RATE``) would pay most for itself at the rate of the step without
    drafting, 0 where no length does: its tokens against its verification,
    its share of the step's draft passes and of the catch-up pass's base (as
    if every request drafted as long: a ``1 / num_reqs`` share) and its
    catch-up tokens, spread over the remaining steps it would draft, were
    the steps at this batch size to draft as often as they lately did
    (``drafting_share``: ``catch_up_share``'s ``f``; ``probe_scheduler``).
    The model alone, no measured correction.

    Args:
        catch_up_tokens, remaining_tokens, draft_limits: [num_reqs], () for
            none, unknown, the cap (as ``best_plan``).
        drafting_share: the share of requests recent decode steps at this
            batch size drafted (1.0: every remaining step).
    """
    if costs.target_now <= 0.0:
        return [0] * num_reqs
    ratio = num_reqs / costs.target_now  # tokens per second without drafting
    lengths = []
    for missed, left, limit in zip(list(catch_up_tokens) or [0] * num_reqs,
                                   list(remaining_tokens) or [None] * num_reqs,
                                   list(draft_limits) or [max_num_draft_tokens] * num_reqs):
        # the catch-up pass's base, like the draft passes, is shared by the batch
        catch_up = (0.0 if not missed else catch_up_share(MAX_RATE, left, max_num_draft_tokens,
                                                           drafting_share)
                    * (costs.catch_up_base / num_reqs + costs.catch_up_per_token * missed))
        cap = min(limit, max_num_draft_tokens)
        # each token after the first adds MAX_RATE^k for one more verified
        # position and a later pass's share: the net is largest at the last
        # length whose token still pays (at least 1), if positive there
        k = max(1, paying_length(MAX_RATE, ratio * (costs.per_token
                                                    + costs.later_pass / num_reqs), cap))
        net = accepted_gain(MAX_RATE, k) - ratio * (
            k * costs.per_token + (costs.first_pass + (k - 1) * costs.later_pass) / num_reqs
            + catch_up)
        lengths.append(k if cap > 0 and net > 0.0 else 0)
    return lengths


def paying_length(rate: float, threshold: float, cap: int, log_threshold: float | None = None,
                  log_rate: float | None = None) -> int:
    """The largest ``k <= cap`` whose last token still pays: ``rate^k >
    threshold`` (0 if none does). Under the geometric model the ``j``-th
    draft token is accepted with probability ``rate^j``, so a draft goes on
    while that beats the token's cost in tokens (``threshold``). A caller
    that asks for many may pass the logarithms it has already taken."""
    if cap <= 0 or threshold >= rate:
        return 0
    if threshold <= 0.0:
        return cap
    if log_threshold is None:
        log_threshold = math.log(threshold)
    if log_rate is None:
        log_rate = math.log(rate)
    return min(cap, max(0, math.ceil(log_threshold / log_rate) - 1))


def accepted_gain(rate: float, num_draft_tokens: int) -> float:
    """Accepted draft tokens expected of a draft of ``num_draft_tokens``:
    ``a (1 - a^k) / (1 - a)`` (``expected_tokens`` less the target's own)."""
    return rate * (1.0 - rate ** num_draft_tokens) / (1.0 - rate)


def _lengths_at(ratio: float, rates: Sequence[float], log_rates: Sequence[float],
                gains: Sequence[Sequence[float]], catch_up: Sequence[float],
                tops: Sequence[int], per_token: float,
                catch_up_per_token: float) -> tuple[list[int], float, float, bool]:
    """Per request, the length maximising gain - ratio * cost (Dinkelbach),
    at most its top (``tops``: [num_reqs] the step's cap or the request's own
    limit, the smaller). ``log_rates`` ([num_reqs] ``log(rate)``) and
    ``gains`` ([num_reqs][k] ``accepted_gain(rate, k)``) are taken once a
    plan: this runs for every request, cap and iteration.

    Returns:
        (lengths, accepted tokens expected, their verification and catch-up
        cost, whether a drafting request catches up).
    """
    lengths = []
    value = cost = 0.0
    catching_up = False
    threshold = ratio * per_token  # a^j must exceed this
    log_threshold = math.log(threshold) if threshold > 0.0 else 0.0
    for rate, log_rate, gain_of, missed, top in zip(rates, log_rates, gains, catch_up, tops):
        k = paying_length(rate, threshold, top, log_threshold, log_rate)
        if k:
            gain = gain_of[k]
            extra = k * per_token + missed * catch_up_per_token
            if gain - ratio * extra <= 0.0:
                k = 0
            else:
                value += gain
                cost += extra
                if missed:
                    catching_up = True
        lengths.append(k)
    return lengths, value, cost, catching_up
