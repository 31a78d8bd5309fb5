"""What deciding from observations two plans old costs, without an engine.

    python -m benchmarks.decision_lag [--batch-sizes 1,4] [--steps 400] [--seeds 20]

On the host path a draft's verification and its step's timings reach the
policy before the next plan; on the CUDA hot path (and under vLLM's async
scheduling) one plan later (``docs/cuda.md``, "What waiting one step
changes"). Here each policy drives a simulated engine twice on the same
seeded text, with the observations one plan late (lag 1) and two (lag 2),
everything else equal: the host path's early exit, one step's costs. The
text alternates easy and hard stretches (each draft token accepted with
probability 0.9 or 0.35, switching with probability 0.05 a token; the
draft's probability of a token is that chance, calibrated), so a policy
that learns late keeps the last stretch's length into the next.

Costs (seconds, fixed lines, as ``tests/policy_simulation.py`` names them):
the CPU (a target step 0.10 + 0.02 a verified token, a draft pass 0.04 +
0.002 a token) and a GPU at small batch (0.020 + 0.00005, 0.004 + 0.00001).
Per method x costs x batch: tokens per target step and draft passes per
token (counts) and the simulated tokens per second, each at lag 1 and 2,
and lag 2 / lag 1 with a 95% t-interval over the seeds.
"""

from __future__ import annotations

import argparse
import random
from collections import deque

from gammatune_tools.bench.methods import GPU_STEP_COSTS
from gammatune_tools.bench.stats import ratio_interval
from vllm_gammatune.methods import METHODS
from vllm_gammatune.policies import (
    BatchView,
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

COSTS = {"cpu": (FixedLinearCost(0.10, 0.02), FixedLinearCost(0.04, 0.002)),
         "gpu": (FixedLinearCost(GPU_STEP_COSTS["target_step_s"], GPU_STEP_COSTS["target_token_s"]),
                 FixedLinearCost(GPU_STEP_COSTS["draft_pass_s"], GPU_STEP_COSTS["draft_token_s"]))}
EASY, HARD, SWITCH = 0.9, 0.35, 0.05
CAP = 8


def _policy(method: str, costs):
    """The method at its defaults (``gammatune_cost`` on the fixed costs)."""
    if method == "gammatune":
        spec = METHODS[method]
        return spec.build_policy(CAP, **spec.resolve({}, CAP))
    return CostAwarePolicy(CAP, target_cost=costs[0], draft_cost=costs[1])


def run(method: str, costs, num_reqs: int, steps: int, lag: int, seed: int) -> dict:
    """One simulated engine: (tokens, target steps, draft passes, seconds)."""
    rng = random.Random(seed)
    target, draft = costs
    policy = _policy(method, costs)
    req_ids = [f"r{i}" for i in range(num_reqs)]
    states = {r: policy.new_state() for r in req_ids}
    easy = [True] * num_reqs
    in_flight: deque = deque()
    tokens = passes = 0
    seconds = 0.0
    drafted = [0] * num_reqs
    for step in range(steps):
        batch = BatchView(num_reqs, num_reqs + sum(drafted))
        plan = policy.plan_batch([states[r] for r in req_ids], batch)
        # the chance of each request's next tokens (the text's stretches)
        chances = []
        for i in range(num_reqs):
            row = []
            for _ in range(CAP + 1):
                if rng.random() < SWITCH:
                    easy[i] = not easy[i]
                row.append(EASY if easy[i] else HARD)
            chances.append(row)
        lengths = list(plan)
        timings = []
        for position in range(1, max(plan, default=0) + 1):
            passes += 1
            tokens_in = num_reqs + sum(drafted) if position == 1 else num_reqs
            timings.append(DraftPassTiming(tokens_in, draft.predict(tokens_in), num_reqs))
            active = [k >= position for k in lengths]
            if isinstance(policy, CostAwarePolicy):
                ends = policy.draft_on([states[r] for r in req_ids], position,
                                       [row[position - 1] for row in chances], active)
                lengths = [min(end, k) if end is not None and on else k
                           for end, k, on in zip(ends, lengths, active)]
            if not any(k > position for k in lengths):
                break
        if max(plan, default=0):
            timings.append(PassesRun(max(lengths)))
        verifications = []
        for i, (r, k) in enumerate(zip(req_ids, lengths)):
            accepted = 0
            while accepted < k and rng.random() < chances[i][accepted]:
                accepted += 1
            tokens += accepted + 1
            if k:
                verifications.append(Verification(r, step, k, accepted, num_reqs=num_reqs))
        scheduled = num_reqs + sum(lengths)
        step_seconds = target.predict(scheduled) + sum(
            t.seconds for t in timings if isinstance(t, DraftPassTiming))
        seconds += step_seconds
        in_flight.append((tuple(verifications), CycleTimings(
            tuple(timings), (CycleWallTime(step_seconds),
                             TargetStepTiming(scheduled, target.predict(scheduled), num_reqs)),
            step)))
        arrived, cycles = in_flight.popleft() if len(in_flight) == lag else ((), None)
        policy.observe_step(StepObservation(step + 1, arrived, (cycles,) if cycles else (),
                                            verified_through=step + 1 - lag), states)
        drafted = lengths
    return {"tokens": tokens, "steps": steps, "passes": passes, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", default="1,4")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    print("| method | costs | batch | tokens/target step (lag 1 -> 2) | "
          "draft passes/token | tokens/s lag 2 / lag 1 [95% t-interval] |")
    print("|---|---|---|---|---|---|")
    for method in ("gammatune", "gammatune_cost"):
        for costs_name, costs in COSTS.items():
            for size in (int(b) for b in args.batch_sizes.split(",")):
                runs = {lag: [run(method, costs, size, args.steps, lag, seed)
                              for seed in range(args.seeds)] for lag in (1, 2)}
                ratios = [(b["tokens"] / b["seconds"]) / (a["tokens"] / a["seconds"])
                          for a, b in zip(runs[1], runs[2])]
                mean, low, high = ratio_interval(ratios)

                def per(lag, num, den):
                    return sum(r[num] for r in runs[lag]) / sum(r[den] for r in runs[lag])

                print(f"| `{method}` | {costs_name} | {size} | "
                      f"{per(1, 'tokens', 'steps'):.2f} -> {per(2, 'tokens', 'steps'):.2f} | "
                      f"{per(1, 'passes', 'tokens'):.3f} -> {per(2, 'passes', 'tokens'):.3f} | "
                      f"**{mean:.3f}** [{low:.3f}, {high:.3f}] |")


if __name__ == "__main__":
    main()
