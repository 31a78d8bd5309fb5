"""A fix for vLLM 0.32's CPU speculative sampling (temperature > 0).

``rejection_sampler.expand_batch_to_tokens`` allocates its output with
``x.new_empty(num_tokens)`` and fills it with the ``expand_kernel``. Without
Triton-CPU, vLLM's CPU platform routes that kernel to
``cpu_triton_utils._expand_kernel_impl``, which passes ``output.to(int64)``
(a temporary copy, for any non-int64 tensor) to the C++ kernel and never
copies it back. The per-token temperature (float32), top-k (int32) and top-p
(float32) used for the *target's* probabilities in rejection sampling are
therefore uninitialised memory, and sampled speculative decoding on the CPU
does not keep the target's distribution (seen with vLLM's own
``draft_model``: a chi-square p-value of ~1e-245 against the target alone;
``tests/e2e/test_sampling_distribution.py`` checks the fix).

This replacement does the same expansion with ``repeat_interleave`` on CPU
tensors and defers to vLLM's kernel on any other device.
"""

from __future__ import annotations

import torch


def expand_batch_to_tokens(
    original,
    x: torch.Tensor,  # [num_reqs]
    cu_num_tokens: torch.Tensor,  # [num_reqs]
    num_tokens: int,
    replace_from: int = 0,
    replace_to: int = 0,
) -> torch.Tensor:
    """[num_reqs] -> [num_tokens], each value repeated for its request's tokens."""
    if x.device.type != "cpu":
        return original(x, cu_num_tokens, num_tokens, replace_from, replace_to)
    # [num_reqs] tokens per request
    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
    # [num_tokens]
    expanded = torch.repeat_interleave(x, counts, output_size=num_tokens)
    if replace_from != replace_to:
        expanded = torch.where(
            expanded == replace_from, torch.full_like(expanded, replace_to), expanded
        )
    return expanded
