"""Which drafting path a device gets: the host path or the CUDA hot path.

On the CPU a read of a tensor's values costs nothing and a draft pass is
dear, so the drafter asks after each pass whether any request still drafts
and ends vLLM's draft loop early. On a GPU each such read stops the host
until the device has caught up, and the next kernels launch late; there the
drafter reads once per step, after every planned pass has been launched
(``docs/cuda.md``, "Two drafting paths"):

- verifications are read with the drafts, so the policy learns of a
  verification one plan late (``DraftLengthPolicy.adapt_to_drafter``);
- the loop runs every planned pass; threshold stops are computed on the
  device and a per-token rule is applied after the loop
  (``DraftStep.replay_token_rule``);
- host data goes to the device through pinned memory, without waiting.

``VLLM_GAMMATUNE_CUDA_HOT_PATH``: unset, the hot path is on for CUDA devices;
``1`` forces it on any device (tests and benchmarks run it on the CPU);
``0`` forces the host path.
"""

from __future__ import annotations

import os

import torch

ENV_VAR = "VLLM_GAMMATUNE_CUDA_HOT_PATH"


def uses_cuda_hot_path(device: torch.device) -> bool:
    """Whether the drafter on ``device`` takes the CUDA hot path.

    Raises:
        ValueError: the environment variable holds anything but 0 or 1.
    """
    value = os.environ.get(ENV_VAR, "")
    if value == "":
        return device.type == "cuda"
    if value not in ("0", "1"):
        raise ValueError(f"{ENV_VAR}={value!r} is not allowed: must be 1 (the CUDA hot "
                         "path on any device) or 0 (the host path), or unset (the hot "
                         "path on CUDA devices)")
    return value == "1"


def read_on_host(tensor: torch.Tensor) -> list:
    """``tensor.tolist()``, a read that waits for the device: the step's one
    read on the hot path. vLLM's sync check (``VLLM_GPU_SYNC_CHECK``) is told
    that this wait is meant, as vLLM's runner tells it of its own reads."""
    from vllm.utils.gpu_sync_debug import gpu_sync_allowed

    with gpu_sync_allowed():
        return tensor.tolist()
