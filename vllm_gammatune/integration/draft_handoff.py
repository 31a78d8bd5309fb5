"""Skip vLLM's per-step draft hand-off on steps where nothing was drafted.

Installed in two processes: on the worker's ``GPUModelRunner.sample_tokens``
and on the engine core's ``Scheduler.update_from_output`` and
``EngineCore.post_step`` (``patches.gpu_model_runner``, ``patches.engine_core``).

Without async scheduling (the plugin's methods turn it off), vLLM's engine
core asks the worker for the step's draft tokens after every executed step:
``EngineCore.post_step`` -> ``take_draft_token_ids``, one more round trip to
the worker process besides ``execute_model`` and ``sample_tokens``. On a step
where the plugin's drafter skipped the draft model, the answer is known
(no request has draft tokens) and changes nothing: the scheduler already
cleared the ``spec_token_ids`` of every request it scheduled in that step
(``Scheduler.schedule``), and requests outside the step are not in the
answer. A cost-aware engine skips on most steps where drafting does not
pay: without this, it would pay that round trip exactly where the method is
supposed to cost what no speculation costs.

How the engine core learns it without asking: the worker tags the step's
``ModelRunnerOutput`` (which crosses to the engine core anyway) when its
drafter skipped (``sample_tokens_tagging_skipped_drafts``); the scheduler
notes the tag when it processes that output
(``update_from_output_noting_skipped_drafts``); ``post_step`` then returns
without the round trip (``post_step_without_empty_handoff``). Any other step,
and any engine without the plugin's drafter, keeps vLLM's path: the tag is
only set on a step the drafter reports skipped, and it is read once.
"""

from __future__ import annotations

from typing import Any

from vllm_gammatune.drafter.contract import plugin_drafter

#: set on a ModelRunnerOutput (worker) and on the Scheduler (engine core)
NO_DRAFT_TOKENS = "gammatune_no_draft_tokens"


def sample_tokens_tagging_skipped_drafts(original, runner, *args, **kwargs) -> Any:
    """``GPUModelRunner.sample_tokens``: tag the output of a step whose
    drafter skipped the draft model for every request."""
    from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput

    drafter = plugin_drafter(runner)
    if drafter is None:
        return original(runner, *args, **kwargs)
    drafter.skipped_this_step = False
    output = original(runner, *args, **kwargs)
    if (drafter.skipped_this_step and type(output) is ModelRunnerOutput
            and output is not EMPTY_MODEL_RUNNER_OUTPUT):
        setattr(output, NO_DRAFT_TOKENS, True)
    return output


def update_from_output_noting_skipped_drafts(original, scheduler, scheduler_output,
                                             model_runner_output, *args, **kwargs) -> Any:
    """``Scheduler.update_from_output``: remember whether this step's output
    carries the tag, for the ``post_step`` that follows it."""
    setattr(scheduler, NO_DRAFT_TOKENS,
            bool(getattr(model_runner_output, NO_DRAFT_TOKENS, False)))
    return original(scheduler, scheduler_output, model_runner_output, *args, **kwargs)


def post_step_without_empty_handoff(original, engine_core, model_executed: bool) -> Any:
    """``EngineCore.post_step``: no ``take_draft_token_ids`` round trip after a
    step that drafted nothing (plain ``step`` path only; the batch-queue path
    fetches drafts itself and is left to vLLM)."""
    scheduler = getattr(engine_core, "scheduler", None)
    skipped = getattr(scheduler, NO_DRAFT_TOKENS, False)
    if skipped:
        setattr(scheduler, NO_DRAFT_TOKENS, False)  # read once
        if model_executed and getattr(engine_core, "batch_queue", None) is None:
            return None
    return original(engine_core, model_executed)
