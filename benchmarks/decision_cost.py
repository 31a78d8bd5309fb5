"""What ``gammatune_cost``'s decisions cost per engine step, without an engine.

    python -m benchmarks.decision_cost [--batch-sizes 1,4,16] [--cap 8] [--steps 2000]

The policy is pure Python, so its cost is the same inside vLLM as here. Per
batch size, two regimes are timed over ``--steps`` synthetic steps, with
fixed step costs (the CPU's shape) so that only the decision is measured:

- *skip*: costs under which drafting never pays: each step is one plan
  (``plan_batch``) and the step's observation (``observe_step``); this is
  all the policy does on a step of a busy CPU at batch 16;
- *draft*: costs under which drafting pays: the plan, then the per-token
  stop after every draft pass until each request stops or reaches the cap
  (``draft_on``, fed token probabilities that keep most drafts going), then
  the verification of every draft (the next step's ``observe_step``, which
  also calibrates the token acceptance).

What the proposer adds around the policy (tensor book-keeping, the
transfer of each pass's token probabilities to the host) is in the engine's
own measure, ``vllm:gammatune_plugin_time_us`` per ``vllm:gammatune_steps``.
"""

from __future__ import annotations

import argparse
import random
import time

from vllm_gammatune.policies import (
    BatchView,
    CostAwarePolicy,
    FixedLinearCost,
    StepObservation,
    Verification,
)

#: never pays: a draft pass costs as much as a target step
SKIP_COSTS = (FixedLinearCost(0.10, 0.0), FixedLinearCost(0.10, 0.0))
#: pays: a draft pass costs 2% of a target step, verification is flat
DRAFT_COSTS = (FixedLinearCost(0.10, 0.0), FixedLinearCost(0.002, 0.0))


def time_steps(batch_size: int, cap: int, steps: int, costs,
               seed: int = 0) -> tuple[float, float, float]:
    """Per step: mean seconds of the plan and the observations, mean seconds
    of the per-token decisions, mean draft passes."""
    rng = random.Random(seed)
    policy = CostAwarePolicy(cap, target_cost=costs[0], draft_cost=costs[1])
    req_ids = [f"r{i}" for i in range(batch_size)]
    states_by_id = {r: policy.new_state() for r in req_ids}
    states = [states_by_id[r] for r in req_ids]
    lengths = [0] * batch_size
    # the token probabilities the draft would give: drawn before timing
    probs = [[[min(0.999, rng.betavariate(8, 1)) for _ in range(batch_size)]
              for _ in range(cap)] for _ in range(64)]
    planning = deciding = 0.0
    passes = 0
    for step in range(steps):
        started = time.perf_counter()
        batch = BatchView(batch_size, batch_size + sum(lengths))
        verifications = tuple(Verification(r, step - 1, k, k - 1, num_reqs=batch_size)
                              for r, k in zip(req_ids, lengths) if k)
        policy.observe_step(StepObservation(step, verifications), states_by_id)
        plan = policy.plan_batch(states, batch)
        planning += time.perf_counter() - started
        started = time.perf_counter()
        lengths = list(plan)
        for position in range(1, max(plan, default=0) + 1):
            passes += 1
            active = [k >= position for k in lengths]
            decisions = policy.draft_on(states, position, probs[step % 64][position - 1],
                                        active)
            for i, end in enumerate(decisions):
                if end is not None and active[i]:
                    lengths[i] = min(end, lengths[i])
            if not any(k > position for k in lengths):
                break
        deciding += time.perf_counter() - started
    return planning / steps, deciding / steps, passes / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", default="1,4,16")
    parser.add_argument("--cap", type=int, default=8, help="the cap (gammatune_cost's default)")
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    print("| batch | regime | plan + observe, µs/step | per-token decisions, µs/step | "
          "draft passes/step |")
    print("|---|---|---|---|---|")
    for size in (int(b) for b in args.batch_sizes.split(",")):
        for regime, costs in (("skip", SKIP_COSTS), ("draft", DRAFT_COSTS)):
            planning, deciding, passes = time_steps(size, args.cap, args.steps, costs)
            print(f"| {size} | {regime} | {planning * 1e6:.0f} | {deciding * 1e6:.0f} | "
                  f"{passes:.1f} |")


if __name__ == "__main__":
    main()
