"""Every patch of vLLM the plugin applies: one module per patched vLLM module.

| module | vLLM target | what / why | remove when |
|---|---|---|---|
| ``arg_utils`` | ``EngineArgs.create_speculative_config`` | accept the plugin's methods and keys, map them to ``draft_model`` + ``additional_config``, turn async scheduling off | vLLM lets plugins register spec methods |
| ``gpu_model_runner`` | ``GPUModelRunner.__init__`` | build ``AdaptiveDraftModelProposer`` for the plugin's methods | vLLM offers a drafter registry |
| ``gpu_model_runner`` | ``GPUModelRunner._sample`` | make the step's ``req_ids`` known to AdaSD's verification | vLLM offers a per-request acceptance hook |
| ``gpu_model_runner`` | ``GPUModelRunner.sample_tokens`` | tag the output of a step whose drafter skipped the draft model | vLLM returns drafts with the step's output |
| ``gpu_model_runner`` | ``GPUModelRunner._update_states`` | drop finished/aborted requests' policy state when the worker hears of them (an idle engine holds none) | vLLM offers a request-finished hook for drafters |
| ``engine_core`` | ``Scheduler.update_from_output`` | note that tag for the step's ``post_step`` | as above |
| ``engine_core`` | ``EngineCore.post_step`` | no ``take_draft_token_ids`` round trip after such a step (~1 ms a step on the CPU) | vLLM skips the fetch when nothing was drafted |
| ``rejection_sampler`` | ``rejection_sample`` | AdaSD's relaxed acceptance (lossy, opt-in); the original otherwise | vLLM offers a per-request acceptance hook |
| ``rejection_sampler`` | ``expand_batch_to_tokens`` | CPU only: vLLM's C++ fallback leaves the target's per-token temperature/top-k/top-p uninitialised, so sampled spec decoding is lossy on CPU | vLLM's ``_expand_kernel_impl`` copies its result back |

Each module's docstring gives the details. Patches only rebind; the logic
lives in ``vllm_gammatune.engine_config``, ``runner_init``, ``acceptance``,
``draft_handoff`` and ``cpu_fixes``.
"""

from vllm_gammatune.patches import (
    arg_utils,
    engine_core,
    gpu_model_runner,
    rejection_sampler,
)

ALL_PATCHES = (arg_utils, engine_core, gpu_model_runner, rejection_sampler)


def apply_all() -> None:
    for patch in ALL_PATCHES:
        patch.apply()
