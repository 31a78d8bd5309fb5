"""Which drafting path a device gets: the host path or the CUDA hot path.

On the CPU a read of a tensor's values costs nothing and a draft pass is
dear, so the drafter asks after each pass whether any request still drafts
and ends vLLM's draft loop early. On a GPU each such read stops the host
until the device has caught up, and the next kernels launch late; there the
drafter reads once per step, after every planned pass has been launched
(``docs/cuda.md``, "Two drafting paths"):

- verifications are read with the drafts, so the policy learns of a
  verification before the plan after next (``Verification.step`` says which
  draft it verified); the n-gram lookup ahead of the draft model, which needs
  the step's sampled tokens before it plans, reads them and the verification
  before the plan instead, and hands vLLM its drafts on the device;
- the loop runs every planned pass, and the padded verification keeps
  every token they produce: no per-token stop applies (``uniform_shape``);
  AdaSD's entropy stops are computed on the device;
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


def takes_hot_path(device: torch.device) -> bool:
    """Whether a draft-model drafter on ``device`` takes the hot path. The
    host path on CUDA (forced with ``VLLM_GAMMATUNE_CUDA_HOT_PATH=0``) is said
    at start, once, as a warning: it waits for the device several times a
    step (``docs/cuda.md``, "No device-wide synchronization")."""
    hot = uses_cuda_hot_path(device)
    if device.type == "cuda" and not hot:
        from vllm.logger import init_logger

        init_logger(__name__).warning(
            "vllm-gammatune: the host path on CUDA (%s=0): it reads the device before the "
            "plan and after each draft pass, and its target steps miss the FULL CUDA "
            "graph (docs/cuda.md)", envs.CUDA_HOT_PATH)
    return hot


def read_on_host(tensor: torch.Tensor) -> list:
    """``tensor.tolist()``, a read that waits for the device: the step's one
    read on the hot path. vLLM's sync check (``VLLM_GPU_SYNC_CHECK``) is told
    that this wait is meant, as vLLM's runner tells it of its own reads."""
    from vllm.utils.gpu_sync_debug import gpu_sync_allowed

    with gpu_sync_allowed():
        return tensor.tolist()
