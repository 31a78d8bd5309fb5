"""drafter.hot_path: which drafting path a device gets."""

from __future__ import annotations

import pytest
import torch

from vllm_gammatune.drafter.hot_path import uses_cuda_hot_path
from vllm_gammatune.envs import CUDA_HOT_PATH


def test_on_for_cuda_devices_unless_the_variable_says_otherwise(monkeypatch):
    monkeypatch.delenv(CUDA_HOT_PATH, raising=False)
    assert uses_cuda_hot_path(torch.device("cuda", 0))
    assert not uses_cuda_hot_path(torch.device("cpu"))
    monkeypatch.setenv(CUDA_HOT_PATH, "1")
    assert uses_cuda_hot_path(torch.device("cpu"))
    monkeypatch.setenv(CUDA_HOT_PATH, "0")
    assert not uses_cuda_hot_path(torch.device("cuda", 0))


def test_anything_else_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(CUDA_HOT_PATH, "yes")
    with pytest.raises(ValueError, match=r"VLLM_GAMMATUNE_CUDA_HOT_PATH='yes' is not allowed"):
        uses_cuda_hot_path(torch.device("cpu"))


def test_the_host_path_on_cuda_is_said_at_start(monkeypatch, caplog):
    """Every draft-model drafter takes the hot path on CUDA; forced off there
    (``VLLM_GAMMATUNE_CUDA_HOT_PATH=0``) the host path says so (a warning
    naming the variable); the CPU's host path says nothing."""
    import logging

    from vllm_gammatune.drafter.hot_path import takes_hot_path

    warnings = []
    monkeypatch.setattr(logging.Logger, "warning",
                        lambda self, msg, *args, **kw: warnings.append(msg % args))
    monkeypatch.delenv("VLLM_GAMMATUNE_CUDA_HOT_PATH", raising=False)
    assert takes_hot_path(torch.device("cuda", 0))
    assert not takes_hot_path(torch.device("cpu"))
    assert warnings == []
    monkeypatch.setenv("VLLM_GAMMATUNE_CUDA_HOT_PATH", "0")
    assert not takes_hot_path(torch.device("cuda", 0))
    assert len(warnings) == 1 and "VLLM_GAMMATUNE_CUDA_HOT_PATH=0" in warnings[0]
