"""Every tensor-parallel rank drafts what TP rank 0 decided.

Each TP rank runs its own drafter, and the ranks' draft forwards are one
collective computation: a rank that runs a draft pass more than another, or
drafts other lengths, waits forever in its forward's all-reduce. The draft
probabilities agree across ranks, but a policy that plans from measured step
costs (``CostObserver``) plans from this process's clock, and its per-token stop
reads the rank's own cost fits; so rank 0's plan and per-token decisions are
broadcast to the other ranks (one small broadcast each; nothing without
tensor parallelism).
"""

from __future__ import annotations

import torch

from vllm_gammatune.drafter.hot_path import read_on_host


def same_plan_on_every_rank(planned: list[int], device: torch.device) -> list[int]:
    """Tensor parallelism: every rank drafts what TP rank 0 planned (one
    small broadcast per step; nothing without tensor parallelism)."""
    from vllm.distributed import get_tp_group

    group = get_tp_group()
    if group.world_size == 1:
        return planned
    # [num_reqs]
    plan = torch.tensor(planned, dtype=torch.int64, device=device)
    return read_on_host(group.broadcast(plan, src=0))


def same_decisions_on_every_rank(decisions: list[int | None],
                                 device: torch.device) -> list[int | None]:
    """Tensor parallelism: every rank ends its drafts where TP rank 0's
    per-token stop ended them (one small broadcast per draft pass). The
    ranks' draft probabilities agree, but the stop also reads the rank's
    own cost fits, and a rank that ran one draft pass more would wait
    forever in its forward's all-reduce."""
    from vllm.distributed import get_tp_group

    group = get_tp_group()
    if group.world_size == 1:
        return decisions
    # [num_reqs]; -1 = draft on
    ends = torch.tensor([-1 if end is None else end for end in decisions],
                        dtype=torch.int64, device=device)
    return [None if end < 0 else end for end in read_on_host(group.broadcast(ends, src=0))]
