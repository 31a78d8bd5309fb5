"""Patch of ``vllm.v1.worker.gpu_model_runner`` (worker process; the CPU runner included: it subclasses it).

Runs in each worker, whose model runner holds the plugin's drafter.

What:
- ``GPUModelRunner.__init__`` -> ``integration.runner_init.init_with_adaptive_drafter``.
- ``GPUModelRunner._sample`` -> ``integration.sampling.sample_step``.
- ``GPUModelRunner._update_states`` ->
  ``integration.lifecycle.update_states_and_forget_finished``.
- ``GPUModelRunner.sample_tokens`` ->
  ``integration.draft_handoff.sample_tokens_tagging_skipped_drafts``.
Why: the runner picks its drafter in an if/elif chain inside ``__init__``;
  for a plugin method it must build ``AdaptiveDraftModelProposer`` (a subclass
  of ``DraftModelProposer``, so vLLM's isinstance checks still hold). AdaSD's
  verification needs the step's ``req_ids``, which vLLM's rejection sampler is
  not given; ``_sample`` hands them over for the duration of the call
  (``integration.sampling.STEP_BEING_VERIFIED``). A
  step without any draft token is sampled by vLLM's plain sampler (vLLM runs
  its rejection sampler on every step once speculation is configured), so a
  step where no request drafts costs what a step without speculation costs.
  ``_update_states`` is where the worker learns which requests finished (also
  in the empty step an idle engine runs for that): their records are
  dropped there, so an idle engine holds none. ``sample_tokens`` tags the
  output of a step whose drafter skipped the draft model, so that the engine
  core does not fetch its (empty) drafts (``patches.engine_core``).
Remove when: vLLM offers a drafter registry and per-request acceptance hooks
  (``sample_tokens``: when vLLM returns drafts with the step's output).
"""

from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from vllm_gammatune.integration.sampling import sample_step
from vllm_gammatune.integration.draft_handoff import sample_tokens_tagging_skipped_drafts
from vllm_gammatune.integration.lifecycle import update_states_and_forget_finished
from vllm_gammatune.patches.base import rebind
from vllm_gammatune.integration.runner_init import init_with_adaptive_drafter


def apply() -> None:
    rebind(
        GPUModelRunner,
        "__init__",
        init_with_adaptive_drafter,
        patch_id="gpu_model_runner.GPUModelRunner.__init__",
    )
    rebind(
        GPUModelRunner,
        "_sample",
        sample_step,
        patch_id="gpu_model_runner.GPUModelRunner._sample",
    )
    rebind(
        GPUModelRunner,
        "_update_states",
        update_states_and_forget_finished,
        patch_id="gpu_model_runner.GPUModelRunner._update_states",
    )
    rebind(
        GPUModelRunner,
        "sample_tokens",
        sample_tokens_tagging_skipped_drafts,
        patch_id="gpu_model_runner.GPUModelRunner.sample_tokens",
    )
