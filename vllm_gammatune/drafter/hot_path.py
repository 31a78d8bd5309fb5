"""Which drafting path a device gets: the host path or the CUDA hot path.

On the CPU a read of a tensor's values costs nothing and a draft pass is
dear, so the drafter asks after each pass whether any request still drafts
and ends vLLM's draft loop early. On a GPU each such read stops the host
until the device has caught up, and the next kernels launch late; there the
drafter reads once per step, after every planned pass has been launched
(``docs/cuda.md``, "Two drafting paths"):

- verifications are read with the drafts, so the policy learns of a
  verification before the plan after next (``Verification.step`` says which
  draft it verified);
- the loop runs every planned pass; threshold stops are computed on the
  device and a per-token rule is applied after the loop
  (``DraftStep.replay_token_rule``);
- host data goes to the device through pinned memory, without waiting.

``VLLM_GAMMATUNE_CUDA_HOT_PATH`` (``envs.cuda_hot_path``): unset, the hot path
is on for CUDA devices; ``1`` forces it on any device (tests and benchmarks
run it on the CPU); ``0`` forces the host path.
"""

from __future__ import annotations

import torch

import vllm_gammatune.envs as envs


def uses_cuda_hot_path(device: torch.device) -> bool:
    """Whether the drafter on ``device`` takes the CUDA hot path.

    Raises:
        ValueError: ``VLLM_GAMMATUNE_CUDA_HOT_PATH`` holds anything but 0 or 1.
    """
    forced = envs.cuda_hot_path()
    return device.type == "cuda" if forced is None else forced


def read_on_host(tensor: torch.Tensor) -> list:
    """``tensor.tolist()``, a read that waits for the device: the step's one
    read on the hot path. vLLM's sync check (``VLLM_GPU_SYNC_CHECK``) is told
    that this wait is meant, as vLLM's runner tells it of its own reads."""
    from vllm.utils.gpu_sync_debug import gpu_sync_allowed

    with gpu_sync_allowed():
        return tensor.tolist()
