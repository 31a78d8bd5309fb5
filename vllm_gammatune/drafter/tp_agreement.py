"""Every tensor-parallel rank drafts what TP rank 0 decided.

Each TP rank runs its own drafter, and the ranks' draft forwards are one
collective computation: a rank that runs a draft pass more than another, or
drafts other lengths, waits forever in its forward's all-reduce. The draft
probabilities agree across ranks, but a policy that plans from measured step
costs (``CostObserver``) plans from this process's clock, and its per-token
stop reads the rank's own cost fits; so rank 0's plan and per-token decisions
are broadcast to the other ranks.

They are host lists, so they go over the group's CPU side
(``GroupCoordinator.broadcast_object``: its message queue or its gloo group),
not through the device: no copy to the device, no read back, nothing that
waits for the device's queue. Nothing is sent without tensor parallelism.
"""

from __future__ import annotations


def _from_rank_0(values: list) -> list:
    """``values`` as TP rank 0 has them (one small broadcast over the CPU
    side of the TP group; nothing without tensor parallelism)."""
    from vllm.distributed import get_tp_group

    group = get_tp_group()
    if group.world_size == 1:
        return values
    return group.broadcast_object(values, src=0)


def same_plan_on_every_rank(planned: list[int]) -> list[int]:
    """[num_reqs] the lengths TP rank 0 planned (one broadcast per step)."""
    return _from_rank_0(planned)


def same_decisions_on_every_rank(decisions: list[int | None]) -> list[int | None]:
    """[num_reqs] where TP rank 0's per-token stop ended each draft (one
    broadcast per draft pass of a step the stop may end early)."""
    return _from_rank_0(decisions)
