"""Free drafts ahead of the draft model: which requests verify an n-gram's tokens.

A drafter that looks the text up (an n-gram match, ``methods.drafters``)
offers some requests a draft that costs no draft pass; what it costs is the
verification of its tokens. Per request, the step compares its two sources,
each in tokens gained minus tokens lost to the time it costs, at the rate of
a step that drafts nothing (``lambda = num_reqs / t_target``, the
planner's starting ratio, ``planner``):

    free:  V_f(k) = b (1 - b^k) / (1 - b) - lambda * c_tok * k,  k <= offer
    model: V_m(k) = a (1 - a^k) / (1 - a)
                    - lambda * (c_tok * k + (t_first + (k - 1) t_later) / B)

with ``b`` the request's acceptance rate of free drafts, ``a`` its rate of
the draft model's, ``c_tok`` the cost of one more verified token, ``t_first``
and ``t_later`` the draft model's passes shared by the ``B`` requests of the
step, each ``k`` the best for its source (the free one: token ``j`` is kept
while ``b^j > lambda * c_tok``, the planner's ``paying_length``). A
request verifies its free draft where ``V_f > 0`` and ``V_f >= V_m``; the
others are left to the draft model, which the planner then plans with full
pass costs over those requests alone (a step where every drafting request
has a free draft runs no draft model at all; its positions are caught up
where the model drafts again, as after any skipped step).

``V_m`` is what the model's draft would be worth were the model to draft
the request, so the comparison only stands where it would: a request that
the step's plan without free drafts leaves at 0 (``model_drafts``: the
margin, the pace rule or its catch-up keeps the model from it) has nothing
to lose to its free draft, and verifies it wherever ``V_f > 0``. On a busy
server, where the draft model stops paying, the lookup's drafts are then
still verified where they pay on their own.

Splitting the pass costs evenly over the batch is the approximation: it
prices the model's draft for one request as if every request shared its
passes. The planner corrects the rest, since it prices the model's passes
whole for the requests left to it. Why, and the prior art:
``docs/cost-aware.md``, "Free drafts ahead of the draft model".

Pure functions; ``[num_reqs]`` lists, in batch order.
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm_gammatune.policies.cost_aware.planner import accepted_gain, paying_length
from vllm_gammatune.policies.cost_aware.step_costs import StepCosts


def free_draft_lengths(costs: StepCosts, free_rates: Sequence[float],
                       model_rates: Sequence[float], offers: Sequence[int],
                       max_num_draft_tokens: int,
                       model_drafts: Sequence[bool] = ()) -> list[int]:
    """Per request, how many of its free draft's tokens to verify (0: the
    draft model's turn), from the comparison of the module docstring.

    Args:
        free_rates: [num_reqs] acceptance rates of the free drafts.
        model_rates: [num_reqs] acceptance rates of the draft model's drafts.
        offers: [num_reqs] tokens each request's lookup offers (0: none).
        model_drafts: [num_reqs] whether the step's plan without free drafts
            has the draft model draft the request; () for every request.
    """
    num_reqs = len(offers)
    if costs.target_now <= 0.0:
        return [0] * num_reqs
    ratio = num_reqs / costs.target_now
    threshold = ratio * costs.per_token
    lengths = []
    for b, a, offer, drafted in zip(free_rates, model_rates, offers,
                                    model_drafts or [True] * num_reqs):
        k = paying_length(b, threshold, min(offer, max_num_draft_tokens))
        value = accepted_gain(b, k) - ratio * costs.per_token * k
        if k == 0 or value <= 0.0:
            lengths.append(0)
            continue
        if not drafted:
            lengths.append(k)
            continue
        model_value = max(
            (accepted_gain(a, j) - ratio * (costs.per_token * j
                                    + (costs.first_pass + (j - 1) * costs.later_pass) / num_reqs)
             for j in range(1, max_num_draft_tokens + 1)),
            default=0.0)
        lengths.append(k if value >= model_value else 0)
    return lengths
