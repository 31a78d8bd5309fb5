"""Driving a policy the way the proposer does, for simulations in unit tests.

``draft_like_the_proposer`` runs one step's drafting: the policy's plan,
then the draft passes through ``DraftStep`` with the policy's per-token stop
(``draft_on``), each pass reported to the policy's clock at the draft's
fixed cost, as ``AdaptiveDraftModelProposer.propose`` and its
``_sample_draft_tokens`` do in the engine.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from vllm_gammatune.draft_step import DraftStep
from vllm_gammatune.policies import BatchView


def draft_like_the_proposer(p, states, batch: BatchView, token_probs: float | Sequence[float],
                            slowdown: float = 1.0, draft_cost=None,
                            prefill_seconds_per_token: float | None = None
                            ) -> tuple[list[int], float]:
    """One step's drafting; returns (the lengths drafted, the seconds its
    passes were charged).

    ``token_probs``: the draft's probability of every request's token, one
    for all positions or one per position (1-based position ``j`` reads
    ``token_probs[j - 1]``). The first pass runs over the step's scheduled
    tokens and one new token per request, later passes over one token per
    request; each is charged ``slowdown`` times ``draft_cost`` (default: the
    policy's own; a policy that keeps none, such as a fixed length, needs it).
    With ``prefill_seconds_per_token``, a first pass over a prompt chunk
    (``batch.has_prefill``) costs that per token and is reported as a
    catch-up pass, as the proposer's timer reports it.
    """
    num_reqs = len(states)
    d_base, d_slope = (draft_cost or p.draft_cost).coefficients()
    step = DraftStep(p.plan_batch(states, batch), torch.device("cpu"),
                     token_rule=lambda position, probs, active: p.draft_on(
                         states, position, probs, active))
    seconds = 0.0
    for position in range(1, step.num_steps + 1):
        tokens = batch.num_scheduled_tokens + num_reqs if position == 1 else num_reqs
        if position == 1 and batch.has_prefill and prefill_seconds_per_token is not None:
            pass_seconds = prefill_seconds_per_token * tokens
            p.observe_catch_up_pass(tokens, pass_seconds)
        else:
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


def simulate_request_stream(p, seed: int, num_requests: int, acceptance: tuple[float, float],
                            target=(0.116, 0.0023), draft=(0.040, 0.0002),
                            catch_up_per_token: float = 0.0023,
                            max_tokens: int = 128) -> list[tuple[float, int, int]]:
    """Requests one after another at batch 1, each with its own acceptance
    rate (uniform in ``acceptance``; every draft token's probability scatters
    around it and is its chance of acceptance) and a prompt of 80-700 tokens,
    on a clock that charges ``target`` and ``draft`` (seconds: base, per
    token) and a catch-up ``catch_up_per_token``, reported to the policy as
    the engine's timers do: the prompt step (whose draft pass, if any, runs
    over the prompt and is priced like a catch-up), then decode steps, where
    a request that drafts after steps without drafting first catches the
    draft up over the positions it missed. Returns per request (its rate,
    steps that drafted, steps)."""
    from vllm_gammatune.policies import FixedLinearCost

    rng = random.Random(seed)
    draft_cost = FixedLinearCost(*draft)
    requests = []
    for _ in range(num_requests):
        rate = rng.uniform(*acceptance)
        prompt = rng.randint(80, 700)
        state = p.new_state()
        missed = generated = drafted_steps = steps = 0
        previous = None
        while generated < max_tokens:
            first = previous is None
            batch = BatchView(1, prompt if first else 1 + previous,
                              catch_up_tokens=(missed,), has_prefill=first,
                              remaining_tokens=(max_tokens - generated,))
            probs = [min(0.999, max(0.02, rng.gauss(rate, 0.2)))
                     for _ in range(p.max_num_draft_tokens)]
            (k,), seconds = draft_like_the_proposer(
                p, [state], batch, probs, draft_cost=draft_cost,
                prefill_seconds_per_token=catch_up_per_token)
            if seconds and missed:
                catch_up_seconds = 0.01 + catch_up_per_token * missed
                p.observe_catch_up_pass(missed, catch_up_seconds)
                seconds += catch_up_seconds
                missed = 0
            accepted = 0
            while accepted < k and rng.random() < probs[accepted]:
                accepted += 1
            if first:
                target_seconds = 0.3 + 0.0015 * prompt  # a prompt step, not timed
            else:
                target_seconds = target[0] + target[1] * (1 + k)
                p.observe_target_step(1 + k, target_seconds)
            if k:
                p.observe(state, k, accepted, BatchView(1))
                drafted_steps += 1
            elif seconds == 0.0:  # the draft did not run: it misses the step's tokens
                missed += prompt if first else 1
            p.observe_cycle_wall_time(seconds + target_seconds)
            generated += accepted + 1
            previous = k
            steps += 1
        requests.append((rate, drafted_steps, steps))
    return requests
