"""Every patch of vLLM the plugin applies: one module per patched vLLM module.

Each module's docstring says what it rebinds, why, and when it can go; the
logic lives in the modules it imports (``engine_config``, ``runner_choice``,
``runner_init``, ``acceptance``, ``draft_handoff``, ``lifecycle``,
``cpu_fixes``). The index of every vLLM internal the plugin touches, rebinds
included, is ``vllm_gammatune.compat.internals.INTERNALS`` (printed as
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
