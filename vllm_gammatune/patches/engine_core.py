"""Patch of ``vllm.v1.engine.core`` and ``vllm.v1.core.sched.scheduler`` (engine-core process).

Runs in the engine core, which schedules steps and hands them to the workers.

What:
- ``EngineCore.post_step`` -> ``integration.draft_handoff.post_step_without_empty_handoff``.
- ``Scheduler.update_from_output`` ->
  ``integration.draft_handoff.update_from_output_noting_skipped_drafts``.
Why: after every executed step vLLM's engine core fetches the step's draft
  tokens from the worker (one more round trip); after a step where the
  plugin's drafter skipped the draft model the answer is empty and changes
  nothing, so the fetch is skipped. The worker side (the tag on
  ``ModelRunnerOutput``) is in ``gpu_model_runner``.
Remove when: vLLM returns draft tokens with the step's output, or skips the
  fetch itself when a drafter proposes nothing.
"""

from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine.core import EngineCore

from vllm_gammatune.integration.draft_handoff import (
    post_step_without_empty_handoff,
    update_from_output_noting_skipped_drafts,
)
from vllm_gammatune.patches.base import rebind


def apply() -> None:
    rebind(
        EngineCore,
        "post_step",
        post_step_without_empty_handoff,
        patch_id="engine_core.EngineCore.post_step",
    )
    rebind(
        Scheduler,
        "update_from_output",
        update_from_output_noting_skipped_drafts,
        patch_id="engine_core.Scheduler.update_from_output",
    )
