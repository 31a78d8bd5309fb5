"""Every patch of vLLM the plugin applies: one module per patched vLLM module.

vLLM loads the plugin (``register()``) in every process it starts, so every
patch is applied everywhere; each module's docstring names the process where
its rebinding matters, what it rebinds, why, and when it can go. The patches
only rebind: the logic lives in the functions they install, in

- ``vllm_gammatune.integration.engine_config`` (``arg_utils``),
- ``vllm_gammatune.integration.runner_choice`` (``config_vllm``, ``gpu_worker``),
- ``vllm_gammatune.integration.runner_init``, ``.sampling``, ``.lifecycle``
  and ``.draft_handoff`` (``gpu_model_runner``),
- ``vllm_gammatune.integration.draft_handoff`` (``engine_core``),
- ``vllm_gammatune.integration.sampling`` and
  ``vllm_gammatune.verify.cpu_sampling_fix`` (``rejection_sampler``).

The index of every vLLM internal the plugin touches, rebinds included, is
``vllm_gammatune.compat.internals.INTERNALS`` (printed as
``docs/patches.md``); ``tests/unit/test_internals.py`` keeps the two in step.
"""

from vllm_gammatune.patches import (
    arg_utils,
    config_vllm,
    engine_core,
    gpu_model_runner,
    gpu_worker,
    rejection_sampler,
)

ALL_PATCHES = (arg_utils, config_vllm, engine_core, gpu_model_runner, gpu_worker,
               rejection_sampler)


def apply_all() -> None:
    for patch in ALL_PATCHES:
        patch.apply()
