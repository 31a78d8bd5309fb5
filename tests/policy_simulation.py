"""Simulated engines that drive the cost-aware policy as the proposer does.

For the unit tests: ``policy`` and the cost shapes they share,
``measured_cpu_policy``, ``trained_states``, ``plan_of`` and
``predicted_of`` (the planner's answer for a policy's requests), and
``simulate`` (an engine on a clock that charges fixed costs, drafting
through the drafter's ``DraftStep``).

To prove that a refactor of ``policies/`` changes no decision::

    python tests/policy_simulation.py record FILE     # every scenario, as JSON
    python tests/policy_simulation.py compare FILE_A FILE_B

Each scenario drives ``CostAwarePolicy`` as the drafter does (one
``StepObservation`` before each plan, the per-token rule after each pass) on
a seeded engine: requests join with prompts
(prompt-chunk steps), decode and leave; skipped steps leave catch-ups; the
clock charges linear costs with noise and the odd idle gap; each draft token
has a probability that is also its chance of acceptance, easy and hard
stretches alternating. The record is every step's plan, the lengths drafted
after the per-token stop, ``last_decision`` whole, each verification's
details, so any changed number shows. Floats are
compared exactly: record both on one machine, each version of the code on
``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import random
import sys

from vllm_gammatune.policies import (
    BatchView,
    CatchUpPassTiming,
    CostAwarePolicy,
    CycleTimings,
    CycleWallTime,
    DraftPassTiming,
    FixedLinearCost,
    PassesRun,
    StepObservation,
    TargetStepTiming,
    Verification,
)
from vllm_gammatune.policies.cost_aware.planner import best_plan, predicted_step

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
            p.observe(state, Verification("r", 0, drafted, accepted, num_reqs=num_reqs))
        # requests that have drafted: past their first probe (due at once)
        state.probes.probe_interval = p.probes.probe_interval
    return states


def measured_cpu_policy(prompt_pass: bool = True, **kwargs) -> CostAwarePolicy:
    """Costs measured as on the 2-core CPU at batch 16: decode passes nearly
    flat in their tokens (memory-bound), the draft's pass over one prompt
    of 171 tokens 0.4 s (the warm-up's; no catch-up yet)."""
    p = CostAwarePolicy(8, **kwargs)
    for n in (16, 32, 16, 48, 16, 32):
        p.observe_costs([TargetStepTiming(n, 0.10 + 0.0075 * n, 16),
                         DraftPassTiming(n, 0.030 + 0.00005 * n, 16)])
    if prompt_pass:
        p.observe_costs([CatchUpPassTiming(171, 0.4)])
    return p


def plan_of(p: CostAwarePolicy, states, batch: BatchView, rates=None) -> list[int]:
    """The planner's best plan for the policy's requests at its costs
    (``rates``: default their estimates)."""
    num_reqs = len(states)
    return best_plan(p.costs.at(batch.num_scheduled_tokens, num_reqs),
                     p.acceptance.rates([s.acceptance for s in states])
                     if rates is None else rates,
                     batch.catch_up_tokens, batch.remaining_tokens,
                     max_num_draft_tokens=p.max_num_draft_tokens,
                     min_draft_gain=p.min_draft_gain,
                     keep_pace=p.keep_pace)


def predicted_of(p: CostAwarePolicy, rates, batch: BatchView, plan) -> tuple[float, float]:
    """(tokens, seconds) the policy's model expects of ``plan``."""
    return predicted_step(p.costs.at(batch.num_scheduled_tokens, len(plan)), rates, plan,
                          batch.catch_up_tokens)


def simulate(p: CostAwarePolicy, num_reqs: int, steps: int, rate: float,
             drafted_step_slowdown: float, seed: int = 0, lag: int = 1) -> list[list[int]]:
    """Drive the policy like the proposer does (its per-token stop through
    ``DraftStep``, with every draft token at probability ``rate``, which is
    also its chance of acceptance), on a clock that charges drafted steps
    ``drafted_step_slowdown`` times what the fixed costs say. A plan's
    verification and timings reach the policy ``lag`` plans later (1: the
    host path; 2: the CUDA hot path). Returns each step's drafted lengths."""
    rng = random.Random(seed)
    in_flight = collections.deque()
    states = {f"r{i}": p.new_state() for i in range(num_reqs)}
    t_base, t_slope = p.costs.target.coefficients()
    plans, drafted = [], [0] * num_reqs
    for step in range(steps):
        batch = BatchView(num_reqs, num_reqs + sum(drafted))
        plan, timings = draft_like_the_proposer(p, list(states.values()), batch, rate,
                                                drafted_step_slowdown)
        plans.append(plan)
        slow = drafted_step_slowdown if max(plan) else 1.0
        verifications = []
        for req_id, k in zip(states, plan):  # the verification, next step
            if k:
                accepted = 0
                while accepted < k and rng.random() < rate:
                    accepted += 1
                verifications.append(Verification(req_id, step, k, accepted,
                                                  num_reqs=num_reqs))
        scheduled = num_reqs + sum(plan)
        target = TargetStepTiming(scheduled, (t_base + t_slope * scheduled) * slow, num_reqs)
        in_flight.append((tuple(verifications), CycleTimings(timings, (target,), step)))
        arrived, cycles = in_flight.popleft() if len(in_flight) == lag else ((), None)
        p.observe_step(StepObservation(step + 1, arrived, (cycles,) if cycles else ()),
                       states)
        drafted = plan
    return plans


def draft_like_the_proposer(p, states, batch, token_prob,
                            slowdown=1.0) -> tuple[list[int], tuple]:
    """One step: the plan, then the draft passes with the policy's per-token
    stop, timed at the draft's fixed cost: (the lengths drafted, the
    timings the drafter hands over in the next observation)."""
    import torch

    from vllm_gammatune.drafter.draft_step import DraftStep

    num_reqs = len(states)
    d_base, d_slope = p.costs.draft.coefficients()
    step = DraftStep(p.plan_batch(states, batch), torch.device("cpu"),
                     token_rule=lambda position, probs, active: p.draft_on(
                         states, position, probs, active))
    timings = []
    for position in range(1, step.num_passes + 1):
        tokens = batch.num_scheduled_tokens + num_reqs if position == 1 else num_reqs
        timings.append(DraftPassTiming(tokens, (d_base + d_slope * tokens) * slowdown,
                                       num_reqs))
        if step.record(torch.zeros(num_reqs, dtype=torch.long), None, None,
                       torch.full((num_reqs,), token_prob)):
            break
    if step.num_passes:
        timings.append(PassesRun(len(step.token_ids)))
    return step.lengths.tolist(), tuple(timings)


# -- recording decisions, to compare two versions of the code ---------------------

#: name -> (policy arguments, engine: max batch, steps, seed, clock costs
#: (target base, per token, draft pass base, per token, catch-up per token)
#: [, the draft's token probabilities on easy and on hard stretches])
CPU = (0.10, 0.01, 0.03, 0.001, 0.002)
GPU = (0.020, 0.00005, 0.004, 0.00001, 0.00002)
SCENARIOS = {
    "measured_batch1": ({}, 1, 700, 1, CPU),
    "measured_batch4": ({}, 4, 700, 2, CPU),
    "measured_batch16": ({}, 16, 400, 3, CPU),
    "measured_gpu_batch8": ({}, 8, 500, 4, GPU),
    "measured_gpu_batch4": ({}, 4, 500, 5, GPU),
    "measured_no_token_stop": ({"token_stop": False}, 2, 500, 6, CPU),
    "probes_rationed": ({"probe_interval": 2, "max_probe_interval": 8}, 6, 700, 7, CPU),
    "probes_unlimited": ({"probe_interval": 2, "probe_budget": 1.0}, 4, 500, 8,
                         (0.05, 0.001, 0.04, 0.0, 0.003)),
    "fixed_pays": ({"target_cost": FixedLinearCost(0.1, 0.0),
                    "draft_cost": FixedLinearCost(0.005, 0.0)}, 4, 500, 9, CPU),
    "fixed_pays_no_token_stop": ({"target_cost": FixedLinearCost(0.1, 0.0),
                                  "draft_cost": FixedLinearCost(0.005, 0.0),
                                  "token_stop": False}, 4, 400, 10, CPU),
    "fixed_rarely_pays": ({"target_cost": FixedLinearCost(0.1, 0.0),
                           "draft_cost": FixedLinearCost(0.06, 0.0), "probe_interval": 2,
                           "probe_budget": 1.0}, 4, 400, 11, CPU),
    "measured_target_only": ({"target_cost": FixedLinearCost(0.1, 0.01)}, 3, 500, 12, CPU),
    "probes_hard_text": ({"probe_interval": 2, "max_probe_interval": 8}, 4, 600, 13, GPU,
                         (0.3, 0.05)),
    "probes_hard_text_unlimited": ({"probe_interval": 3, "probe_budget": 1.0}, 3, 600, 14,
                                   GPU, (0.35, 0.1)),
}
#: the draft's token probabilities on easy and on hard stretches, unless a
#: scenario gives its own
EASY_HARD = (0.92, 0.35)
#: tokens of a prompt chunk per step
CHUNK = 48


@dataclasses.dataclass
class _Request:
    state: object
    prompt_left: int
    max_tokens: int | None
    generated: int = 0
    catch_up: int = 0
    easy: bool = True
    drafted: int = 0  # draft tokens awaiting verification
    drafted_at: int = 0  # the step whose plan made them
    probs: list = dataclasses.field(default_factory=list)


def _decision(policy) -> dict | None:
    decision = policy.last_decision
    return None if decision is None else dataclasses.asdict(decision)


def _draft(policy, requests, plan, rng, clock, easy_hard, first_pass_tokens: int,
           has_prefill: bool) -> tuple[list, list, int, list]:
    """The draft passes of one step under the per-token stop: (lengths,
    draft_on decisions, passes run, the timings the drafter hands over in the
    next observation); times every pass."""
    target_base, target_slope, pass_base, pass_slope, catch_up_slope = clock
    states = [r.state for r in requests]
    lengths, stopped = list(plan), [k == 0 for k in plan]
    decisions, position, timings = [], 0, []
    missed = sum(r.catch_up for r, k in zip(requests, plan) if k)
    if missed:
        timings.append(CatchUpPassTiming(
            missed, catch_up_slope * missed * rng.uniform(0.9, 1.1)))
    for r in requests:
        r.probs = []
    while not all(stopped):
        position += 1
        tokens = first_pass_tokens if position == 1 else len(requests)
        seconds = (pass_base + pass_slope * tokens) * rng.uniform(0.95, 1.05)
        if position == 1 and has_prefill:  # prefill-like: priced as a catch-up
            timings.append(CatchUpPassTiming(tokens, seconds + catch_up_slope * tokens))
        else:
            timings.append(DraftPassTiming(tokens, seconds, len(requests)))
        probs = []
        for r in requests:
            centre = easy_hard[0] if r.easy else easy_hard[1]
            probs.append(min(0.999, max(0.01, rng.gauss(centre, 0.08))))
        active = [not s for s in stopped]
        said = policy.draft_on(states, position, probs, active)
        decisions.append(said)
        for i, (r, q) in enumerate(zip(requests, probs)):
            if not active[i]:
                continue
            r.probs.append(q)
            if said[i] is not None:
                lengths[i], stopped[i] = said[i], True
            elif position >= plan[i]:
                stopped[i] = True
    if position:
        timings.append(PassesRun(position))
    return lengths, decisions, position, timings


def _run(name: str) -> list[dict]:
    kwargs, max_batch, steps, seed, clock, *centres = SCENARIOS[name]
    easy_hard = centres[0] if centres else EASY_HARD
    target_base, target_slope, pass_base, pass_slope, _ = clock
    rng = random.Random(seed)
    policy = CostAwarePolicy(8, **kwargs)
    requests: list[_Request] = []
    scheduled, records, wall = 0, [], 0.0
    drafting: list = []  # the last step's drafting timings
    for step in range(steps):
        # the target step that verified the last drafts, then their verification
        target = []
        if requests:
            seconds = (target_base + target_slope * scheduled) * rng.uniform(0.95, 1.05)
            if rng.random() < 0.01:
                seconds += 20.0  # an idle gap
            target.append(TargetStepTiming(scheduled, seconds, len(requests)))
            wall += seconds
        verified, verifications = [], []
        for i, r in enumerate(requests):
            if r.drafted:
                accepted = 0
                while accepted < r.drafted and rng.random() < r.probs[accepted]:
                    accepted += 1
                verification = Verification(f"r{i}", r.drafted_at, r.drafted, accepted,
                                            num_reqs=len(requests))
                verifications.append((r, verification))
                verified.append((r.drafted, accepted,
                                 policy.verification_details(r.state, verification)))
                r.generated += accepted
            r.drafted = 0
        requests = [r for r in requests
                    if r.max_tokens is None and r.generated < 120
                    or r.max_tokens is not None and r.generated < r.max_tokens]
        while len(requests) < max_batch and rng.random() < 0.3:
            requests.append(_Request(policy.new_state(), rng.choice([1, 30, 200]),
                                     rng.choice([None, 40, 300])))
        if requests:
            target.append(CycleWallTime(wall * rng.uniform(1.0, 1.1)))
            wall = 0.0
        # one observation a step, before the plan: the last step's drafting,
        # the verifications, the target step
        states = {v.req_id: r.state for r, v in verifications}
        policy.observe_step(StepObservation(step, tuple(v for _, v in verifications),
                                            (CycleTimings(tuple(drafting), tuple(target)),)),
                            states)
        for r, v in verifications:
            r.state = states[v.req_id]
        drafting = []
        if not requests:
            continue
        for r in requests:
            if rng.random() < 0.08:
                r.easy = not r.easy
        chunks = [min(CHUNK, r.prompt_left) for r in requests]
        has_prefill = any(c > 1 for c in chunks)
        scheduled = sum(max(1, c) for c in chunks)
        batch = BatchView(
            len(requests), scheduled, tuple(r.catch_up for r in requests), has_prefill,
            tuple(r.max_tokens - r.generated for r in requests)
            if all(r.max_tokens is not None for r in requests) else ())
        states = [r.state for r in requests]
        if len(requests) == 1 and step % 7 == 0:
            plan = [policy.next_num_draft_tokens(states[0], batch)]
        else:
            plan = policy.plan_batch(states, batch)
        decision = _decision(policy)
        lengths, decisions, passes, drafting = _draft(policy, requests, plan, rng, clock,
                                                      easy_hard, scheduled + len(requests),
                                                      has_prefill)
        for r, c, k in zip(requests, chunks, lengths):
            r.prompt_left -= c
            r.generated += 1 if r.prompt_left <= 0 else 0
            if max(plan) == 0:
                r.catch_up += max(1, c)
            elif k:
                r.catch_up = 0
            r.drafted, r.drafted_at = k, step
        scheduled += sum(lengths)
        records.append({
            "plan": plan, "lengths": lengths, "draft_on": decisions, "passes": passes,
            "decision": decision, "verified": verified,
        })
    return records


def record(path: str) -> None:
    print("recording", sys.modules[CostAwarePolicy.__module__].__file__)
    with open(path, "w") as f:
        json.dump({name: _run(name) for name in SCENARIOS}, f)


def compare(path_a: str, path_b: str) -> int:
    with open(path_a) as f:
        a = json.load(f)
    with open(path_b) as f:
        b = json.load(f)
    differing = 0
    for name in SCENARIOS:
        steps_a, steps_b = a.get(name), b.get(name)
        problem = None
        if steps_a is None or steps_b is None:
            problem = "missing"
        elif len(steps_a) != len(steps_b):
            problem = f"{len(steps_a)} steps vs {len(steps_b)}"
        else:
            for i, (x, y) in enumerate(zip(steps_a, steps_b)):
                if x != y:
                    keys = [k for k in x if x[k] != y.get(k)]
                    problem = f"step {i} differs in {keys}"
                    break
        differing += problem is not None
        kinds = {}
        for s in steps_a or []:
            if s["decision"] is not None:
                kinds[s["decision"]["kind"]] = kinds.get(s["decision"]["kind"], 0) + 1
        print(f"{name}: {'identical' if problem is None else problem} {kinds}")
    return 1 if differing else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Record the cost-aware policy's decisions over simulated "
                    "engines, or compare two records.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("record").add_argument("file")
    compare_command = commands.add_parser("compare")
    compare_command.add_argument("file_a")
    compare_command.add_argument("file_b")
    args = parser.parse_args(argv)
    if args.command == "record":
        record(args.file)
        return 0
    return compare(args.file_a, args.file_b)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
