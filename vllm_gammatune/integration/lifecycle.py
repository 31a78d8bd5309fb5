"""Dropping a finished request's records as soon as the worker hears of it.

The drafter sweeps its per-request records against the runner's live
requests when it drafts; an engine that goes idle drafts no more, so without
this the last batch's records (and the ``vllm:gammatune_tracked_requests``
gauge) would stay until the next request. vLLM tells the workers of finished
and aborted requests in the next step's ``SchedulerOutput.finished_req_ids``,
and the engine core runs that step (with no tokens scheduled) even when
nothing else is left (``Scheduler.has_finished_requests``). So after
``GPUModelRunner._update_states`` has removed them from ``runner.requests``,
the drafter forgets them (``forget_finished``, which also updates the gauge).
Preempted requests are not in ``finished_req_ids``: they keep their records
(``drafter.request_records``).
"""

from __future__ import annotations

from vllm_gammatune.drafter.contract import plugin_drafter


def update_states_and_forget_finished(original, runner, scheduler_output, *args, **kwargs):
    """``GPUModelRunner._update_states`` that also drops finished requests' records."""
    result = original(runner, scheduler_output, *args, **kwargs)
    finished = scheduler_output.finished_req_ids
    drafter = plugin_drafter(runner)
    if finished and drafter is not None:
        # A finished id may be live again (aborted and resubmitted under the
        # same id): the new request starts from the initial state.
        drafter.forget_finished(set(runner.requests) - set(finished))
    return result
