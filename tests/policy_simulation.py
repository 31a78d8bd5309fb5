"""Driving a policy the way the proposer does, for simulations in unit tests.

``draft_like_the_proposer`` runs one step's drafting: the policy's plan,
then the draft passes through ``DraftStep`` with the policy's per-token stop
(``draft_on``), each pass reported to the policy's clock at the draft's
fixed cost, as ``AdaptiveDraftModelProposer.propose`` and its
``_sample_draft_tokens`` do in the engine.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vllm_gammatune.draft_step import DraftStep
from vllm_gammatune.policies import BatchView


def draft_like_the_proposer(p, states, batch: BatchView, token_probs: float | Sequence[float],
                            slowdown: float = 1.0, draft_cost=None) -> tuple[list[int], float]:
    """One step's drafting; returns (the lengths drafted, the seconds its
    passes were charged).

    ``token_probs``: the draft's probability of every request's token, one
    for all positions or one per position (1-based position ``j`` reads
    ``token_probs[j - 1]``). The first pass runs over the step's scheduled
    tokens and one new token per request, later passes over one token per
    request; each is charged ``slowdown`` times ``draft_cost`` (default: the
    policy's own; a policy that keeps none, such as a fixed length, needs it).
    """
    num_reqs = len(states)
    d_base, d_slope = (draft_cost or p.draft_cost).coefficients()
    step = DraftStep(p.plan_batch(states, batch), torch.device("cpu"),
                     token_rule=lambda position, probs, active: p.draft_on(
                         states, position, probs, active))
    seconds = 0.0
    for position in range(1, step.num_steps + 1):
        tokens = batch.num_scheduled_tokens + num_reqs if position == 1 else num_reqs
        pass_seconds = (d_base + d_slope * tokens) * slowdown
        p.observe_draft_pass(tokens, pass_seconds, num_reqs)
        seconds += pass_seconds
        prob = token_probs if isinstance(token_probs, float) else token_probs[position - 1]
        if step.record(torch.zeros(num_reqs, dtype=torch.long), None, None,
                       torch.full((num_reqs,), prob)):
            break
    if step.num_steps:
        p.draft_ended(len(step.token_ids))
    return step.lengths.tolist(), seconds
