"""The cost-aware policy and its cost model against synthetic sequences."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

from vllm_gammatune.draft_kv.holes import DraftKVHoles, plan_catch_up_passes
from vllm_gammatune.drafter.draft_step import DraftStep
from vllm_gammatune.policies import (
    BatchLocalLinearCost,
    BatchView,
    CostAwarePolicy,
    CycleCheck,
    FixedLinearCost,
)

# Shapes seen on the 2-core CPU with the Qwen 1.5B/0.5B pair (seconds): a
# target step of ~100 ms plus ~20 ms per extra token; a draft pass of ~40 ms.
CPU_TARGET = FixedLinearCost(0.10, 0.02)
CPU_DRAFT = FixedLinearCost(0.04, 0.002)
# A GPU at small batch: verification nearly free per token.
GPU_TARGET = FixedLinearCost(0.020, 0.00005)
GPU_DRAFT = FixedLinearCost(0.004, 0.00001)


def policy(target=CPU_TARGET, draft=CPU_DRAFT, cap=8, **kwargs) -> CostAwarePolicy:
    return CostAwarePolicy(cap, target_cost=target, draft_cost=draft, **kwargs)


def trained_states(p: CostAwarePolicy, num_reqs: int, drafted: int, accepted: int):
    states = [p.new_state() for _ in range(num_reqs)]
    for state in states:
        for _ in range(20):
            p.observe(state, drafted, accepted, BatchView(num_reqs))
    return states


def brute_force_best(p, states, batch):
    """The best plan by enumeration (tiny batches only)."""
    rates = [p.acceptance_rate(s) for s in states]
    t_base, t_slope = p.target_cost.coefficients()
    d_base, d_slope = p.draft_cost.coefficients()
    n = len(states)
    best, best_ratio = None, -1.0
    for plan in itertools.product(range(p.max_num_draft_tokens + 1), repeat=n):
        value = sum(p.expected_tokens(a, k) for a, k in zip(rates, plan))
        cost = t_base + t_slope * (n + sum(plan))
        if max(plan) > 0:
            cost += d_base + d_slope * (batch.num_scheduled_tokens + n)
            cost += (max(plan) - 1) * (d_base + d_slope * n)
            cost += sum(d_slope * plan[i] for i in range(n))
        if value / cost > best_ratio + 1e-12:
            best, best_ratio = list(plan), value / cost
    return best, best_ratio


def ratio_of(p, states, batch, plan):
    rates = [p.acceptance_rate(s) for s in states]
    t_base, t_slope = p.target_cost.coefficients()
    d_base, d_slope = p.draft_cost.coefficients()
    n = len(states)
    value = sum(p.expected_tokens(a, k) for a, k in zip(rates, plan))
    cost = t_base + t_slope * (n + sum(plan))
    if max(plan) > 0:
        cost += (d_base + d_slope * (batch.num_scheduled_tokens + n)
                 + (max(plan) - 1) * (d_base + d_slope * n) + d_slope * sum(plan))
    return value / cost


def test_expected_tokens_is_the_geometric_model():
    p = policy()
    assert p.expected_tokens(0.5, 0) == 1.0
    assert p.expected_tokens(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert p.expected_tokens(0.8, 5) == pytest.approx((1 - 0.8 ** 6) / 0.2)


def test_acceptance_rate_follows_the_requests_own_counts():
    p = policy()
    good = trained_states(p, 1, drafted=4, accepted=4)[0]
    bad = trained_states(p, 1, drafted=4, accepted=0)[0]
    assert p.acceptance_rate(good) > 0.9
    assert p.acceptance_rate(bad) < 0.2
    # truncated geometric MLE: 3 accepted then a rejection, every time -> 0.75
    mid = trained_states(p, 1, drafted=6, accepted=3)[0]
    assert p.acceptance_rate(mid) == pytest.approx(0.75, abs=0.06)


def test_chooses_zero_when_drafting_cannot_pay():
    p = policy()
    states = trained_states(p, 16, drafted=4, accepted=1)
    assert p.plan_batch(states, BatchView(16, 16)) == [0] * 16
    # and even a perfect draft does not pay when a draft pass costs a target step
    p = policy(draft=FixedLinearCost(0.2, 0.0))
    states = trained_states(p, 4, drafted=4, accepted=4)
    assert p.best_plan(states, BatchView(4, 4)) == [0] * 4


def test_grows_when_drafting_pays():
    p = policy(target=GPU_TARGET, draft=GPU_DRAFT)
    weak = trained_states(p, 1, drafted=4, accepted=1)
    strong = trained_states(p, 1, drafted=4, accepted=4)
    k_weak = p.best_plan(weak, BatchView(1, 1))[0]
    k_strong = p.best_plan(strong, BatchView(1, 1))[0]
    assert 1 <= k_weak < k_strong == p.max_num_draft_tokens


def test_shrinks_as_the_batch_grows_on_cpu_costs():
    p = policy()
    lengths = []
    for batch_size in (1, 4, 16):
        states = trained_states(p, batch_size, drafted=4, accepted=3)
        lengths.append(max(p.best_plan(states, BatchView(batch_size, batch_size))))
    assert lengths[0] > 0
    assert lengths == sorted(lengths, reverse=True)
    assert lengths[-1] == 0


@pytest.mark.parametrize("seed", range(6))
def test_joint_plan_matches_brute_force(seed):
    rng = random.Random(seed)
    target = FixedLinearCost(rng.uniform(0.01, 0.2), rng.uniform(0.0, 0.03))
    draft = FixedLinearCost(rng.uniform(0.0, 0.08), rng.uniform(0.0, 0.004))
    p = policy(target, draft, cap=4)
    states = []
    for _ in range(3):
        accepted = rng.randint(0, 4)
        states += trained_states(p, 1, drafted=4, accepted=accepted)
    batch = BatchView(3, 3 + rng.randint(0, 6))
    want, want_ratio = brute_force_best(p, states, batch)
    got = p.best_plan(states, batch)
    assert ratio_of(p, states, batch, got) == pytest.approx(want_ratio, rel=1e-6), (got, want)


def test_prompt_step_drafts_once_decode_steps_after_prompts_draft():
    p = policy()  # CPU costs: drafting pays at batch 1, not at 16
    busy = trained_states(p, 16, drafted=4, accepted=3)
    new = trained_states(p, 1, drafted=4, accepted=3)  # a request's prompt chunk
    long_chunk = BatchView(1, 201, has_prefill=True)
    short_chunk = BatchView(1, 2, has_prefill=True)
    # the first decode step, the long chunk to catch up, spread: drafts
    first_decode = BatchView(1, 1, catch_up_tokens=(200,), remaining_tokens=(256,))
    # a new engine: a chunk's draft prefill waits, however short, and no
    # probe runs in its place
    new[0].steps_since_draft = 100
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
    # the decode steps after prompt chunks stop drafting (the batch grew to 16)
    for _ in range(3):
        p.plan_batch(busy, BatchView(16, 16 + 500, has_prefill=True))
        assert p.plan_batch(busy, BatchView(16, 16)) == [0] * 16
    assert p.plan_batch(new, long_chunk) == [0]
    assert p.plan_batch(new, short_chunk) == [0]  # p = 0.42 < 1/2


def test_prompt_step_prices_then_waits_until_decode_steps_after_prompts_draft():
    p = CostAwarePolicy(8, target_cost=CPU_TARGET)  # draft and catch-up measured
    for tokens in (4, 8, 12):
        p.draft_cost.add(tokens, 0.04 + 0.002 * tokens, 1)
    new = trained_states(p, 1, drafted=4, accepted=3)
    tiny_chunk = BatchView(1, 2, has_prefill=True)
    assert not p.catch_up_cost.ready
    assert p.plan_batch(new, tiny_chunk) == [1]  # drafts once: the price
    p.observe_catch_up_pass(2, 0.03 + 0.002 * 2)  # as the proposer times it
    assert max(p.plan_batch(new, BatchView(1, 1))) > 0  # p: 0.25
    for _ in range(2):
        assert p.plan_batch(new, tiny_chunk) == [0]  # p below 1/2: waits
        assert max(p.plan_batch(new, BatchView(1, 1))) > 0
    assert max(p.plan_batch(new, tiny_chunk)) > 0  # p > 1/2, the price known


def measured_cpu_policy(prompt_pass: bool = True, **kwargs) -> CostAwarePolicy:
    """Costs measured as on the 2-core CPU at batch 16: decode passes nearly
    flat in their tokens (memory-bound), the draft's pass over one prompt
    of 171 tokens 0.4 s (the warm-up's; no catch-up yet)."""
    p = CostAwarePolicy(8, **kwargs)
    for n in (16, 32, 16, 48, 16, 32):
        p.observe_target_step(n, 0.10 + 0.0075 * n, 16)
        p.observe_draft_pass(n, 0.030 + 0.00005 * n, 16)
    if prompt_pass:
        p.observe_catch_up_pass(171, 0.4)
    return p


def test_a_prompt_chunk_drafts_once_to_price_catch_ups():
    """A warm-up without a prompt pass (a one-token first request) leaves
    catch-ups unpriced: the next prompt chunk drafts one token for every
    request with nothing to catch up, and once that pass is timed, prompt
    chunks wait again (no decode step has drafted after one yet)."""
    p = measured_cpu_policy(prompt_pass=False)
    states = [p.new_state() for _ in range(3)]
    chunk = BatchView(3, 2 + 300, catch_up_tokens=(4, 0, 0), has_prefill=True)
    assert p.catch_up_line(3) is None
    assert p.plan_batch(states, chunk) == [0, 1, 1]
    assert p.last_decision.kind == "price"
    p.observe_catch_up_pass(302, 0.7)  # the proposer times that pass
    assert p.catch_up_line(3) == (0.0, pytest.approx(0.7 / 302))
    assert p.plan_batch(states, chunk) == [0, 0, 0]


def test_catch_up_is_priced_from_prompt_passes_before_its_fit_is_ready():
    p = measured_cpu_policy()
    assert not p.catch_up_cost.ready
    assert p.catch_up_line(16) == (0.0, pytest.approx(0.4 / 171))
    # a 2,160-token catch-up (16 new requests' prompts) costs ~5 s, not
    # the decode pass's slope (~0.4 ms) times it
    states = [p.new_state() for _ in range(16)]
    rates = [p.acceptance_rate(s) for s in states]
    batch = BatchView(16, 16, catch_up_tokens=(135,) * 16)
    skipped = p.predicted_step(rates, batch, [0] * 16)[1]
    probed = p.predicted_step(rates, batch, [1] * 16)[1]
    assert probed - skipped > 2160 * 0.4 / 171


def test_no_probe_pays_a_catch_up_the_budget_cannot_cover():
    """At batch 16, where probing new requests means catching the draft up
    over their whole prompts, no probe fits the budget; the same requests
    without a catch-up still probe (the price is what stops them)."""
    def drafted_steps(catch_up: int) -> int:
        p = measured_cpu_policy(probe_interval=2, max_probe_interval=4)
        states = [p.new_state() for _ in range(16)]
        batch = BatchView(16, 16, catch_up_tokens=(catch_up,) * 16,
                          remaining_tokens=(60,) * 16)
        return sum(max(p.plan_batch(states, batch)) > 0 for _ in range(400))

    assert drafted_steps(0) > 0
    assert drafted_steps(135) == 0


def test_catch_up_fit_learns_a_pass_far_larger_than_any_before():
    kept, default = BatchLocalLinearCost(drop_outliers=False), BatchLocalLinearCost()
    for cost in (kept, default):
        for n in (4, 8, 12) * 4:
            cost.add(n, 0.03 + 0.0001 * n)
    # a 2,000-token pass at a prompt's rate: 100 times the line's prediction
    assert not default.add(2000, 4.6)  # a step timer's idle gap: dropped
    assert kept.add(2000, 4.6)  # a pass timed alone: learned
    assert kept.predict(2000) > 10 * default.predict(2000)


def test_catch_up_cost_makes_a_lagging_request_wait():
    p = policy(target=GPU_TARGET, draft=FixedLinearCost(0.004, 0.001))
    states = trained_states(p, 2, drafted=4, accepted=4)
    fresh = p.best_plan(states, BatchView(2, 2, catch_up_tokens=(0, 0)))
    lagging = p.best_plan(states, BatchView(2, 2, catch_up_tokens=(0, 500)))
    assert fresh[1] > 0 and lagging[1] == 0 and lagging[0] > 0


def test_catch_up_is_spread_over_the_requests_remaining_tokens():
    p = policy(target=GPU_TARGET, draft=FixedLinearCost(0.004, 0.001))
    states = trained_states(p, 2, drafted=4, accepted=3)  # rate 0.75
    # 256 tokens left at most 4 a step: 64 steps, a 64th of the catch-up now
    assert p.catch_up_share(0.75, 256) == pytest.approx(1 / 64)
    assert p.catch_up_share(0.75, 10_000) == p.catch_up_share(0.75, 256)  # the horizon
    assert p.catch_up_share(0.75, 2) == 1.0 == p.catch_up_share(0.75, None)

    def plan(remaining):
        return p.best_plan(states, BatchView(2, 2, catch_up_tokens=(0, 100),
                                             remaining_tokens=remaining))

    assert max(p.best_plan(states, BatchView(2, 2))) > 0  # drafting pays, no catch-up
    assert plan(())[1] == 0 and plan((2, 2))[1] == 0  # all of it now: waits
    assert plan((256, 256))[1] > 0  # a long way to go: catches up and drafts


def test_a_catch_up_is_spread_whenever_drafting_pays_without_it():
    """A request whose drafting pays on its own catches up and drafts even
    after a long stretch where the engine drafted nothing (an engine-wide
    share of drafted steps would charge it whole and lock drafting out for
    good); where drafting does not pay even without the catch-up, the step
    skips."""
    # a 50 ms target step; a 300-token catch-up costs 65 ms, ~1 ms per step
    # when spread over the ~64 steps a request with rate 0.75 has left
    p = policy(target=FixedLinearCost(0.05, 0.0005), draft=FixedLinearCost(0.005, 0.0002))
    good = trained_states(p, 3, drafted=4, accepted=3)
    lagging = BatchView(3, 3, catch_up_tokens=(0, 0, 300), remaining_tokens=(256,) * 3)
    assert min(p.best_plan(good, lagging)) > 0  # spread over ~64 drafted steps
    bad = trained_states(p, 3, drafted=4, accepted=0)
    for _ in range(200):
        p.plan_batch(bad, BatchView(3, 3))  # nothing pays: skips (and probes)
    assert p.drafting_share < 0.05
    assert min(p.best_plan(good, lagging)) > 0  # still: it drafts after catching up
    # all of the catch-up now (2 tokens left): the lagging request waits
    short = BatchView(3, 3, catch_up_tokens=(0, 0, 300), remaining_tokens=(256, 256, 2))
    plan = p.best_plan(good, short)
    assert min(plan[:2]) > 0 and plan[2] == 0
    assert p.best_plan(bad, lagging) == [0, 0, 0]


def test_drafts_only_on_a_predicted_gain_above_the_margin():
    """A step drafts for its own sake only if the model predicts at least
    min_draft_gain more tokens per second than not drafting."""
    below = above = 0
    for num_reqs in (1, 2, 4):
        for accepted in range(9):
            plain = policy(min_draft_gain=0.0)
            states = trained_states(plain, num_reqs, drafted=8, accepted=accepted)
            batch = BatchView(num_reqs, num_reqs)
            best = plain.best_plan(states, batch)
            gain = (ratio_of(plain, states, batch, best)
                    / ratio_of(plain, states, batch, [0] * num_reqs) - 1.0)
            margined = policy(min_draft_gain=0.05)
            margined_states = trained_states(margined, num_reqs, drafted=8, accepted=accepted)
            plan = margined.best_plan(margined_states, batch)
            if max(best) > 0 and gain < 0.05:
                below += 1
                assert plan == [0] * num_reqs, (num_reqs, accepted, gain)
            elif max(best) > 0:
                above += 1
                assert plan == best, (num_reqs, accepted, gain)
    assert below and above  # both sides of the margin were exercised


def test_reprobes_with_backoff():
    p = policy(probe_interval=4, max_probe_interval=16, probe_budget=1.0)
    state = trained_states(p, 1, drafted=4, accepted=0)[0]
    batch = BatchView(1, 1)  # where a good draft would pay, this one does not
    plans = [p.plan_batch([state], batch)[0] for _ in range(60)]
    probes = [i for i, k in enumerate(plans) if k]
    assert all(plans[i] == 1 for i in probes)
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert probes[0] == 3  # the 4th step without drafting probes
    # every probe after one that did not pay doubles the wait, up to the cap
    assert gaps[:4] == [4, 8, 16, 16]


def test_probe_budget_bounds_the_time_probes_add():
    """Where drafting does not pay, the time probes lose is at most the
    budget's share of the predicted engine time, shared by every request (new
    ones included), and probes still come."""
    budget = 0.02
    p = policy(probe_interval=2, max_probe_interval=4, probe_budget=budget)
    states = trained_states(p, 4, drafted=4, accepted=0)
    batch = BatchView(4, 4)
    skip_seconds = p.predicted_step([0.01] * 4, batch, [0] * 4)[1]
    extra = total = 0.0
    probe_steps = []
    for step in range(2000):
        if step % 50 == 49:  # a request leaves, a fresh one (interval 2) joins
            states[step % 4] = p.new_state()
        rates = [p.acceptance_rate(s) for s in states]
        plan = p.plan_batch(states, batch)
        tokens, seconds = p.predicted_step(rates, batch, plan)
        total += seconds
        if max(plan) > 0:
            probe_steps.append(step)
            extra += seconds - tokens * skip_seconds / 4  # 4 tokens without probes
            for state, k in zip(states, plan):
                if k:
                    p.observe(state, k, 0, batch)
    assert probe_steps, "probes must still come"
    assert extra <= budget * total
    # without the budget the same run probes at least every max_probe_interval steps
    unlimited = policy(probe_interval=2, max_probe_interval=4, probe_budget=1.0)
    states = trained_states(unlimited, 4, drafted=4, accepted=0)
    unlimited_probes = sum(max(unlimited.plan_batch(states, batch)) > 0 for _ in range(2000))
    assert unlimited_probes > 3 * len(probe_steps)
    assert skip_seconds > 0


def test_last_decision_says_what_each_step_chose():
    p = policy(probe_interval=4, max_probe_interval=16, probe_budget=1.0)
    state = trained_states(p, 1, drafted=4, accepted=0)[0]
    kinds = []
    for _ in range(4):
        plan = p.plan_batch([state], BatchView(1, 1, catch_up_tokens=(7,)))
        decision = p.last_decision
        kinds.append(decision.kind)
        assert decision.num_draft_tokens == sum(plan) and decision.batch_size == 1
        assert decision.catch_up_tokens == (7 if max(plan) else 0)
    assert kinds == ["skip", "skip", "skip", "probe"]
    good = trained_states(p, 1, drafted=4, accepted=4)[0]
    fast = policy(target=GPU_TARGET, draft=GPU_DRAFT)
    assert max(fast.plan_batch([good], BatchView(1, 1))) > 0
    assert fast.last_decision.kind == "draft" and not fast.last_decision.informed
    assert fast.last_decision.predicted_seconds > 0


def test_probe_resets_when_drafting_pays_again():
    p = policy(target=GPU_TARGET, draft=GPU_DRAFT, probe_interval=2)
    state = p.new_state()
    state.probing, state.probe_interval = True, 64
    for _ in range(20):
        p.observe(state, 4, 4, BatchView(1))
    assert p.plan_batch([state], BatchView(1, 1))[0] > 0
    assert state.probe_interval == 2 and not state.probing


def test_warms_up_by_drafting_until_costs_are_measured():
    p = CostAwarePolicy(8, warmup_num_draft_tokens=2)
    states = [p.new_state() for _ in range(3)]
    assert p.plan_batch(states, BatchView(3, 3)) == [2, 2, 2]
    for n in (3, 9, 3, 9):
        p.observe_target_step(n, 0.1 + 0.01 * n)
        p.observe_draft_pass(n, 0.03 + 0.001 * n)
    assert p.target_cost.ready and p.draft_cost.ready


# -- the cost model under a mocked clock ------------------------------------


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_online_cost_recovers_a_linear_cost_from_clock_readings():
    clock, cost = FakeClock(), BatchLocalLinearCost()
    rng = random.Random(0)
    for _ in range(200):
        n = rng.choice([4, 8, 20, 36])
        start = clock()
        clock.advance(0.08 + 0.015 * n + rng.uniform(-0.002, 0.002))
        cost.add(n, clock() - start)
    intercept, slope = cost.coefficients()
    assert intercept == pytest.approx(0.08, abs=0.01)
    assert slope == pytest.approx(0.015, abs=0.001)


def test_online_cost_ignores_idle_gaps_and_stays_non_negative():
    clock, cost = FakeClock(), BatchLocalLinearCost()
    for i in range(40):
        start = clock()
        clock.advance(0.05 if i % 10 else 0.05)
        if i == 25:
            clock.advance(30.0)  # the engine sat idle between two bursts
        assert cost.add(4, clock() - start) == (i != 25)
    assert cost.predict(4) == pytest.approx(0.05)
    intercept, slope = cost.coefficients()
    assert intercept >= 0 and slope == 0.0  # one size seen: no slope invented
    # decreasing with size (noise): clamped, never negative
    weird = BatchLocalLinearCost()
    for n, t in [(1, 0.2), (10, 0.1), (20, 0.05)] * 3:
        weird.add(n, t)
    assert min(weird.coefficients()) >= 0
    assert all(weird.predict(n) >= 0 for n in (0, 1, 100))


def test_online_cost_follows_a_machine_that_slows_down():
    cost = BatchLocalLinearCost(memory=0.9)
    for n in [2, 6] * 20:
        cost.add(n, 0.01 * n)
    for n in [2, 6] * 20:
        cost.add(n, 0.03 * n)
    assert cost.predict(6) == pytest.approx(0.18, rel=0.05)
    with pytest.raises(ValueError):
        BatchLocalLinearCost(memory=1.0)


# -- draft KV holes -----------------------------------------------------------


def test_holes_open_on_skip_close_on_catch_up_or_rewrite():
    holes = DraftKVHoles()
    holes.on_skipped(["a", "b"], [10, 20])
    holes.on_skipped(["a", "b"], [11, 21])  # still the first missed position
    assert holes.catch_up_tokens("a", 12) == 2
    assert holes.catch_up_tokens("c", 5) == 0
    # the draft runs: "a" caught up, "b" did not draft and stays behind
    holes.on_draft_pass(["a", "b"], [12, 22], caught_up={"a"})
    assert holes.hole_start("a") is None and holes.catch_up_tokens("b", 23) == 3
    # "b" is recomputed from position 5 (preemption): the pass rewrites its hole
    holes.on_draft_pass(["b"], [5], caught_up=set())
    assert holes.hole_start("b") is None
    holes.on_skipped(["x"], [3])
    holes.forget_missing({"y"})
    assert len(holes) == 0


def test_blocks_written_while_skipped_give_inheriting_requests_a_hole():
    """Prefix caching: a request whose first step starts after cached blocks
    the draft never wrote must catch up over them; valid blocks need nothing."""
    holes, size = DraftKVHoles(), 16
    # "a" writes positions 0-39 (blocks 7, 8, 9) while the draft skips
    holes.on_skipped(["a"], [0])
    holes.record_blocks("a", 0, 40, [7, 8, 9], size)
    assert all(holes.is_stale(b) for b in (7, 8, 9))
    # "b" shares a's first two blocks (32 cached positions) and starts at 32
    holes.inherit("b", 32, [7, 8, 12], size)
    assert holes.catch_up_tokens("b", 32) == 32  # the whole cached prefix
    holes.inherit("b", 32, [7, 8, 12], size)  # later steps change nothing
    assert holes.catch_up_tokens("b", 32) == 32
    # "b" catches up and drafts: the blocks it wrote hold draft KV again
    holes.on_draft_pass(["b"], [32], caught_up={"b"})
    holes.record_blocks("b", 0, 40, [7, 8, 12], size)
    assert not any(holes.is_stale(b) for b in (7, 8, 12))
    assert holes.is_stale(9)  # a's own block, still behind a's hole
    # "c" inherits the now valid blocks: no hole; a fresh request neither
    holes.inherit("c", 32, [7, 8, 13], size)
    holes.inherit("d", 0, [9], size)
    assert holes.catch_up_tokens("c", 32) == holes.catch_up_tokens("d", 0) == 0
    # a request without a hole that reuses a stale block rewrites it
    holes.record_blocks("d", 0, 5, [9], size)
    assert not holes.is_stale(9)
    # a request that drafts but keeps its hole leaves its blocks stale
    holes.on_skipped(["c"], [32])
    holes.on_draft_pass(["c"], [33], caught_up=set())
    holes.record_blocks("c", 33, 34, [7, 8, 13], size)
    assert holes.is_stale(13) and not holes.is_stale(8)
    holes.forget_missing({"a"})
    holes.inherit("b", 16, [9], size)  # forgotten: checked again as new
    assert holes.catch_up_tokens("b", 16) == 0


@pytest.mark.parametrize("capacity", [1, 3, 7, 100])
def test_catch_up_passes_cover_each_segment_once_in_order(capacity):
    segments = [(0, 10, 17), (3, 0, 5), (5, 4, 4), (7, 2, 3)]
    passes = plan_catch_up_passes(segments, capacity)
    for p in passes:
        assert sum(end - start for _, start, end in p) <= capacity
        assert len({row for row, _, _ in p}) == len(p)  # a request once per pass
    covered: dict[int, list[int]] = {}
    for p in passes:
        for row, start, end in p:
            covered.setdefault(row, []).extend(range(start, end))
    assert covered == {0: list(range(10, 17)), 3: list(range(5)), 7: [2]}
    assert len(passes) == math.ceil(13 / capacity) or capacity < 7


def test_no_probe_where_even_a_perfect_draft_would_not_pay():
    # a draft pass costs as much as a target step: drafting never pays
    p = policy(draft=FixedLinearCost(0.5, 0.0), probe_interval=2)
    states = trained_states(p, 4, drafted=4, accepted=0)
    plans = [p.plan_batch(states, BatchView(4, 4)) for _ in range(20)]
    assert all(plan == [0] * 4 for plan in plans)


def test_cost_fit_is_local_to_the_batch_size():
    """Flat at batch 4, steep at batch 16 (the CPU's shape): each batch size
    sees its own slope, not one line through both."""
    cost = BatchLocalLinearCost()
    for _ in range(30):
        for n in (4, 8, 12):
            cost.add(n, 0.13 + 0.001 * n, batch_size=4)
        for n in (16, 24, 32):
            cost.add(n, 0.02 * n, batch_size=16)
    small = cost.coefficients(4)
    large = cost.coefficients(16)
    assert small[1] == pytest.approx(0.001, abs=0.002)
    assert large[1] == pytest.approx(0.02, abs=0.003)
    assert cost.predict(8, batch_size=4) == pytest.approx(0.138, abs=0.01)


# -- the model checked against the clock (CycleCheck) -------------------------


def test_cycle_check_records_only_whole_cycles():
    check = CycleCheck(min_cycles=1)

    def cycle(passes_timed=2, target_batch=4, seconds=0.1, draft_passes=2):
        check.open(4, draft_passes, predicted_tokens=8.0, predicted_seconds=0.4)
        for _ in range(passes_timed):
            check.on_draft_pass(0.05)
        check.on_accepted(3)
        check.on_target_step(seconds, target_batch)
        return check.close()

    assert cycle()
    assert not cycle(passes_timed=1)  # a draft pass was not timed (prefill step)
    assert not cycle(target_batch=3)  # a request left before the verification
    assert not cycle(seconds=30.0)  # an idle gap, not a step
    assert not check.close()  # nothing open
    assert check.num_cycles(4, drafted=True) == 1
    # realized (4 + 3) tokens in 0.2 s against 8 predicted in 0.4 s
    assert check.efficiency(4, drafted=True) == pytest.approx((7 / 0.2) / (8 / 0.4))
    assert check.num_cycles(4, drafted=False) == 0
    # a catch-up far costlier than predicted is no idle gap: it counts
    caught_up = CycleCheck(min_cycles=1)
    caught_up.open(4, 1, predicted_tokens=5.0, predicted_seconds=0.4)
    caught_up.on_catch_up_pass(5.0)
    caught_up.on_draft_pass(0.05)
    caught_up.on_target_step(0.1, 4)
    assert caught_up.close().seconds == pytest.approx(5.15)
    assert caught_up.num_cycles(4, drafted=True) == 1


def test_cycle_wall_time_counts_what_no_pass_timer_sees():
    """Reported wall time from plan to plan replaces the sum of the timed
    parts: work around the draft passes (input preparation) is charged too."""
    check = CycleCheck(min_cycles=1)
    check.open(4, 1, predicted_tokens=6.0, predicted_seconds=0.2)
    check.on_draft_pass(0.05)
    check.on_accepted(2)
    check.on_target_step(0.15, 4)
    check.on_wall_time(0.3)  # 0.1 s more than the timed parts
    measured = check.close()
    assert measured.tokens == 6 and measured.seconds == pytest.approx(0.3)
    assert check.efficiency(4, drafted=True) == pytest.approx((6 / 0.3) / (6 / 0.2))
    # an idle gap seen by the wall clock is not a cycle either
    check.open(4, 0, predicted_tokens=4.0, predicted_seconds=0.1)
    check.on_target_step(0.1, 4)
    check.on_wall_time(30.0)
    assert check.close() is None


def test_a_revised_prediction_is_what_the_cycle_is_checked_against():
    """The plan counted 2 passes and 3 tokens; the per-token stop ran 1
    pass, and the tokens it kept were expected to yield 2."""
    check = CycleCheck(min_cycles=1)
    check.open(1, 2, predicted_tokens=3.0, predicted_seconds=0.2)
    check.revise(-1.0, 0.0)
    check.on_draft_passes_run(1, seconds_per_pass=0.05)
    check.on_draft_pass(0.05)
    check.on_accepted(1.0)
    check.on_target_step(0.1, 1)
    assert check.close().seconds == pytest.approx(0.15)
    assert check.efficiency(1, drafted=True) == pytest.approx(1.0)
    check.revise(5.0, 5.0)  # nothing open: nothing to revise
    assert check.efficiency(1, drafted=True) == pytest.approx(1.0)


def test_drafting_scale_compares_drafted_with_skipped_cycles():
    check = CycleCheck(memory=0.9, min_cycles=3, scale_bounds=(0.25, 4.0))
    for i in range(10):
        # the model is 20% pessimistic on plain steps, and flatters drafting:
        # drafted steps emit what it says but take twice its 0.2 s
        check.open(4, 0, predicted_tokens=4.0, predicted_seconds=0.12)
        check.on_target_step(0.10, 4)
        check.close()
        if i < 2:
            assert check.drafting_scale(4) == 1.0  # no drafted evidence yet
        check.open(4, 1, predicted_tokens=6.0, predicted_seconds=0.2)
        check.on_draft_pass(0.1)
        check.on_accepted(2)
        check.on_target_step(0.3, 4)
        check.close()
    assert check.drafting_scale(4) == pytest.approx(0.5 / 1.2)
    assert check.is_informed(4) and not check.is_informed(16)
    assert check.drafting_scale(16) == 1.0  # per batch size
    with pytest.raises(ValueError):
        CycleCheck(memory=0.0)


def simulate(p: CostAwarePolicy, num_reqs: int, steps: int, rate: float,
             drafted_step_slowdown: float, seed: int = 0) -> list[list[int]]:
    """Drive the policy like the proposer does (its per-token stop through
    ``DraftStep``, with every draft token at probability ``rate``, which is
    also its chance of acceptance), on a clock that charges drafted steps
    ``drafted_step_slowdown`` times what the fixed costs say. Returns each
    step's drafted lengths."""
    rng = random.Random(seed)
    states = [p.new_state() for _ in range(num_reqs)]
    t_base, t_slope = p.target_cost.coefficients()
    d_base, d_slope = p.draft_cost.coefficients()
    plans, drafted = [], [0] * num_reqs
    for _ in range(steps):
        batch = BatchView(num_reqs, num_reqs + sum(drafted))
        plan = draft_like_the_proposer(p, states, batch, rate, drafted_step_slowdown)
        plans.append(plan)
        slow = drafted_step_slowdown if max(plan) else 1.0
        for state, k in zip(states, plan):  # the verification, next step
            if k:
                accepted = 0
                while accepted < k and rng.random() < rate:
                    accepted += 1
                p.observe(state, k, accepted, batch)
        scheduled = num_reqs + sum(plan)
        p.observe_target_step(scheduled, (t_base + t_slope * scheduled) * slow, num_reqs)
        drafted = plan
    return plans


def draft_like_the_proposer(p, states, batch, token_prob, slowdown=1.0) -> list[int]:
    """One step: the plan, then the draft passes with the policy's per-token
    stop, timed at the draft's fixed cost; the lengths drafted."""
    num_reqs = len(states)
    d_base, d_slope = p.draft_cost.coefficients()
    step = DraftStep(p.plan_batch(states, batch), torch.device("cpu"),
                     token_rule=lambda position, probs, active: p.draft_on(
                         states, position, probs, active))
    for position in range(1, step.num_steps + 1):
        tokens = batch.num_scheduled_tokens + num_reqs if position == 1 else num_reqs
        p.observe_draft_pass(tokens, (d_base + d_slope * tokens) * slowdown, num_reqs)
        if step.record(torch.zeros(num_reqs, dtype=torch.long), None, None,
                       torch.full((num_reqs,), token_prob)):
            break
    if step.num_steps:
        p.draft_ended(len(step.token_ids))
    return step.lengths.tolist()


def test_measured_cycles_overrule_a_model_that_flatters_drafting():
    # the check alone: no margin on the predicted gain
    honest = policy(min_draft_gain=0.0)
    plans = simulate(honest, 4, 200, rate=0.93, drafted_step_slowdown=1.0)
    assert sum(max(plan) > 0 for plan in plans[50:]) > 0.9 * 150  # drafting pays here
    assert 0.8 < honest.cycle_check.drafting_scale(4) < 1.25

    flattered = policy(min_draft_gain=0.0)
    plans = simulate(flattered, 4, 400, rate=0.93, drafted_step_slowdown=2.0)
    late = plans[200:]
    assert flattered.cycle_check.drafting_scale(4) < 0.7
    # only probes draft now (one token), and they still come
    assert all(max(plan) <= 1 for plan in late)
    assert 0 < sum(max(plan) > 0 for plan in late) < 0.2 * len(late)

    unchecked = policy(check_cycles=False, min_draft_gain=0.0)
    plans = simulate(unchecked, 4, 200, rate=0.93, drafted_step_slowdown=2.0)
    assert sum(max(plan) > 0 for plan in plans[50:]) > 0.9 * 150


def test_probes_the_clock_finds_expensive_are_rationed_by_the_clock():
    """The budget charges a probe what it measured, not what the model said:
    where probe steps take four times the predicted time, fewer of them run."""
    def probe_steps(slowdown):
        p = policy(probe_interval=2, max_probe_interval=4)
        plans = simulate(p, 4, 1500, rate=0.05, drafted_step_slowdown=slowdown)
        return sum(max(plan) > 0 for plan in plans)

    honest, expensive = probe_steps(1.0), probe_steps(4.0)
    assert 0 < expensive < 0.6 * honest


def test_online_cost_running_sums_equal_a_fit_over_the_window():
    """The fit kept up to date sample by sample (window wrapping, several
    batch sizes, rebuilds) equals one computed from the window afresh."""
    rng = random.Random(1)
    running = BatchLocalLinearCost(window=32)
    for step in range(200):
        b = rng.choice([1, 2, 4, 16])
        running.add(b + rng.randrange(0, 8), 0.05 + 0.01 * rng.random() * b, batch_size=b)
        if step % 7 == 0:
            for b in (1, 4, 16):
                running.coefficients(b)  # sums kept from here on
        fresh = BatchLocalLinearCost(window=32)
        fresh._samples.extend(running._samples)
        for b in (1, 2, 4, 16):
            assert running.coefficients(b) == pytest.approx(fresh.coefficients(b),
                                                            rel=1e-9, abs=1e-12)
