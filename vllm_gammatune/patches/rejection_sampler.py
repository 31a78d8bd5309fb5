"""Patch of ``vllm.v1.sample.rejection_sampler`` (worker process).

Runs in each worker, inside ``GPUModelRunner._sample`` (``gpu_model_runner``).

What:
- ``expand_batch_to_tokens`` -> ``verify.cpu_sampling_fix.expand_batch_to_tokens``.
- ``rejection_sample`` -> ``integration.sampling.rejection_sample_step``.
Why (rejection_sample): AdaSD (lossy, opt-in) accepts a mismatching draft token
  whose JS distance to the target is below the request's T_V; it learns from
  each verified token. Outside a step handed over by ``_sample`` the original
  runs unchanged.
Why (expand_batch_to_tokens): on the CPU (no Triton-CPU), vLLM 0.32's C++ fallback of ``expand_kernel``
  writes into a temporary int64 copy of the output, so the target's per-token
  temperature, top-k and top-p in rejection sampling are uninitialised memory:
  sampled speculative decoding is not lossless on the CPU, vLLM's own
  ``draft_model`` included. CUDA and other devices keep vLLM's kernel.
Remove when: vLLM's ``cpu_triton_utils._expand_kernel_impl`` copies its result
  back (as its sibling wrappers do); vLLM offers a per-request acceptance hook.
"""

from vllm.v1.sample import rejection_sampler

from vllm_gammatune.integration.sampling import rejection_sample_step
from vllm_gammatune.patches.base import rebind
from vllm_gammatune.verify.cpu_sampling_fix import expand_batch_to_tokens


def apply() -> None:
    rebind(
        rejection_sampler,
        "expand_batch_to_tokens",
        expand_batch_to_tokens,
        patch_id="rejection_sampler.expand_batch_to_tokens",
    )
    rebind(
        rejection_sampler,
        "rejection_sample",
        rejection_sample_step,
        patch_id="rejection_sampler.rejection_sample",
    )
