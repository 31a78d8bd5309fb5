"""When a step with a prompt chunk drafts (``cost_aware.prompt_chunks``)."""

from __future__ import annotations

import pytest
from policy_simulation import CPU_TARGET, measured_cpu_policy, policy, trained_states

from vllm_gammatune.policies import BatchView, CatchUpPassTiming, CostAwarePolicy
from vllm_gammatune.policies.cost_aware.catch_ups import price_plan
from vllm_gammatune.policies.cost_aware.prompt_chunks import PromptChunks


def test_prompt_step_drafts_once_decode_steps_after_prompts_draft():
    p = policy()  # CPU costs: drafting pays at batch 1, not at 16
    busy = trained_states(p, 16, drafted=4, accepted=3)
    new = trained_states(p, 1, drafted=4, accepted=3)  # a request's prompt chunk
    long_chunk = BatchView(1, 201, has_prefill=True)
    short_chunk = BatchView(1, 2, has_prefill=True)
    # the first decode step, the long chunk to catch up, spread: drafts
    first_decode = BatchView(1, 1, catch_up_tokens=(200,), remaining_tokens=(256,))
    # an engine whose decode steps at batch 1 draft (so a catch-up there is
    # spread over the steps that will draft), none yet after a prompt chunk:
    # a chunk's draft prefill waits, however short, and no probe runs in its
    # place
    for _ in range(30):
        assert max(p.plan_batch(trained_states(p, 1, drafted=4, accepted=3),
                                BatchView(1, 1))) > 0
    new[0].probes.steps_since_draft = 100
    assert p.plan_batch(new, long_chunk) == [0]
    assert p.plan_batch(new, short_chunk) == [0]
    # the decode steps after prompt chunks draft even with the catch-up to
    # pay (batch 1): chunks draft too once that is the rule, short ones
    # first (once p >= 1/2), long ones when their prefill is worth it
    first_drafted = {"short": None, "long": None}
    for i in range(20):
        for name, chunk in (("short", short_chunk), ("long", long_chunk)):
            if max(p.plan_batch(new, chunk)) > 0 and first_drafted[name] is None:
                first_drafted[name] = i
            assert max(p.plan_batch(new, first_decode)) > 0
    # two decode steps a round: p = 1 - 0.75^2 < 1/2 at i = 1, 1 - 0.75^4 at 2
    assert first_drafted["short"] == 2
    assert first_drafted["long"] is not None and first_drafted["long"] > 1
    assert max(p.plan_batch(new, long_chunk)) > 0
    assert max(p.plan_batch(new, BatchView(1, 1))) > 0
    # decode steps not right after a prompt chunk do not count
    for _ in range(8):
        assert p.plan_batch(busy, BatchView(16, 16)) == [0] * 16
    assert max(p.plan_batch(new, long_chunk)) > 0
    # p is kept per batch size: a prompt chunk at batch 16 waits (no decode
    # step after one drafted there), while batch 1 keeps its p
    busy_chunk = BatchView(16, 16 + 500, has_prefill=True)
    for _ in range(3):
        assert p.plan_batch(busy, busy_chunk) == [0] * 16
        assert p.plan_batch(busy, BatchView(16, 16)) == [0] * 16
    assert max(p.plan_batch(new, long_chunk)) > 0
    # a batch size whose decode steps after prompt chunks drafted, then stop
    two = trained_states(p, 2, drafted=4, accepted=3)
    for _ in range(4):
        p.plan_batch(two, BatchView(2, 2 + 1, has_prefill=True))
        assert max(p.plan_batch(two, BatchView(2, 2))) > 0
    assert p.prompt_chunks.drafts_after_prompt.at(2) > 0.5
    assert max(p.plan_batch(two, BatchView(2, 2 + 1, has_prefill=True))) > 0
    for _ in range(3):  # the acceptance collapses: decode steps skip
        for state in two:
            p.acceptance.observe(state.acceptance, 4, 0)
        p.plan_batch(two, BatchView(2, 2 + 1, has_prefill=True))
        p.plan_batch(two, BatchView(2, 2))
        assert p.last_decision.kind != "draft"
    assert p.prompt_chunks.drafts_after_prompt.at(2) < 0.5
    assert p.plan_batch(two, BatchView(2, 2 + 1, has_prefill=True)) == [0, 0]
    assert max(p.plan_batch(new, long_chunk)) > 0


def test_prompt_step_prices_then_waits_until_decode_steps_after_prompts_draft():
    p = CostAwarePolicy(8, target_cost=CPU_TARGET)  # draft and catch-up measured
    for tokens in (4, 8, 12):
        p.costs.draft.add(tokens, 0.04 + 0.002 * tokens, 1)
    new = trained_states(p, 1, drafted=4, accepted=3)
    tiny_chunk = BatchView(1, 2, has_prefill=True)
    assert not p.costs.catch_up.ready
    assert p.plan_batch(new, tiny_chunk) == [1]  # drafts once: the price
    p.observe_costs([CatchUpPassTiming(2, 0.03 + 0.002 * 2)])  # as the proposer times it
    assert max(p.plan_batch(new, BatchView(1, 1))) > 0  # p: 0.25
    for _ in range(2):
        assert p.plan_batch(new, tiny_chunk) == [0]  # p below 1/2: waits
        assert max(p.plan_batch(new, BatchView(1, 1))) > 0
    assert max(p.plan_batch(new, tiny_chunk)) > 0  # p > 1/2, the price known


def test_a_prompt_chunk_drafts_once_to_price_catch_ups():
    """A warm-up without a prompt pass (a one-token first request) leaves
    catch-ups unpriced: the next prompt chunk drafts one token for every
    request with nothing to catch up, and once that pass is timed, prompt
    chunks wait again (no decode step has drafted after one yet)."""
    p = measured_cpu_policy(prompt_pass=False)
    states = [p.new_state() for _ in range(3)]
    chunk = BatchView(3, 2 + 300, catch_up_tokens=(4, 0, 0), has_prefill=True)
    assert p.costs.catch_up_line(3) is None
    assert p.plan_batch(states, chunk) == [0, 1, 1]
    assert p.last_decision.kind == "price"
    p.observe_costs([CatchUpPassTiming(302, 0.7)])  # the proposer times that pass
    assert p.costs.catch_up_line(3) == (0.0, pytest.approx(0.7 / 302))
    assert p.plan_batch(states, chunk) == [0, 0, 0]


def test_p_counts_only_the_decode_steps_right_after_a_prompt_chunk():
    chunks = PromptChunks()
    p = chunks.drafts_after_prompt
    assert chunks.waits(2)  # p = 0: no chunk drafts
    chunks.step_planned(has_prefill=False, plan=[3, 3])  # no chunk before: no count
    assert p.at(2) == 0.0
    chunks.step_planned(has_prefill=True, plan=[0])
    chunks.step_planned(has_prefill=False, plan=[2, 0])  # drafted: p = 0.25
    chunks.step_planned(has_prefill=False, plan=[2, 2])  # not right after one
    assert p.at(2) == pytest.approx(0.25)
    for _ in range(2):
        chunks.step_planned(has_prefill=True, plan=[0, 0])
        chunks.step_planned(has_prefill=False, plan=[1, 1])
    assert p.at(2) == pytest.approx(1 - 0.75 ** 3)
    assert not chunks.waits(2)
    # g > (1 - p) C: with p = 0.58, a chunk of 1 s drafts for a gain of 0.43 s
    assert chunks.drafts(0.43, 1.0, 2) and not chunks.drafts(0.41, 1.0, 2)
    # another batch size has its own p
    assert chunks.waits(1) and p.at(3) == 0.0 and not chunks.drafts(0.9, 1.0, 3)
    chunks.step_planned(has_prefill=True, plan=[0, 0])
    chunks.step_planned(has_prefill=False, plan=[0, 0])  # skipped: p falls
    assert p.at(2) == pytest.approx(0.75 * (1 - 0.75 ** 3))


def test_a_price_plan_drafts_every_request_with_nothing_to_catch_up():
    assert price_plan((4, 0, 0), 3) == [0, 1, 1]
    assert price_plan((), 2) == [1, 1]
