"""Dropping a finished request's policy state as soon as the worker hears of it.

The drafter sweeps its ``RequestStateTable`` against the runner's live
requests when it drafts; an engine that goes idle drafts no more, so without
this the last batch's states (and the ``vllm:gammatune_tracked_requests``
gauge) would stay until the next request. vLLM tells the workers of finished
and aborted requests in the next step's ``SchedulerOutput.finished_req_ids``,
and the engine core runs that step (with no tokens scheduled) even when
nothing else is left (``Scheduler.has_finished_requests``). So after
``GPUModelRunner._update_states`` has removed them from ``runner.requests``,
their states go too, and the gauge is updated. Preempted requests are not in
``finished_req_ids``: they keep their state (``state.py``).
"""

from __future__ import annotations


def update_states_and_forget_finished(original, runner, scheduler_output, *args, **kwargs):
    """``GPUModelRunner._update_states`` that also drops finished requests' states."""
    result = original(runner, scheduler_output, *args, **kwargs)
    finished = scheduler_output.finished_req_ids
    table = getattr(getattr(runner, "drafter", None), "request_states", None)
    if finished and table is not None:
        drafter = runner.drafter
        # A finished id may be live again (aborted and resubmitted under the
        # same id): the new request starts from the initial state.
        live = set(runner.requests) - set(finished)
        table.forget_missing(live)
        holes = getattr(drafter, "draft_kv_holes", None)  # gammatune_cost
        if holes is not None:
            holes.forget_missing(live)
        pending = getattr(drafter, "pending_drafts", None)
        if pending:
            for req_id in [r for r in pending if r not in live]:
                del pending[req_id]
        counters = getattr(drafter, "_counters", None)
        if counters is not None:
            counters.set_tracked_requests(len(table))
    return result
