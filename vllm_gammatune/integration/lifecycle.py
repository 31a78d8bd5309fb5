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
    drafter = getattr(runner, "drafter", None)
    forget = getattr(drafter, "forget_requests_not_in", None)  # the plugin's drafter
    if finished and forget is not None:
        # A finished id may be live again (aborted and resubmitted under the
        # same id): the new request starts from the initial state.
        forget(set(runner.requests) - set(finished))
        counters = getattr(drafter, "_counters", None)
        if counters is not None:
            counters.set_tracked_requests(len(drafter.request_states))
    return result
