"""drafter.hot_path: which drafting path a device gets."""

from __future__ import annotations

import pytest
import torch

from vllm_gammatune.drafter.hot_path import ENV_VAR, uses_cuda_hot_path


def test_on_for_cuda_devices_unless_the_variable_says_otherwise(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert uses_cuda_hot_path(torch.device("cuda", 0))
    assert not uses_cuda_hot_path(torch.device("cpu"))
    monkeypatch.setenv(ENV_VAR, "1")
    assert uses_cuda_hot_path(torch.device("cpu"))
    monkeypatch.setenv(ENV_VAR, "0")
    assert not uses_cuda_hot_path(torch.device("cuda", 0))


def test_anything_else_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "yes")
    with pytest.raises(ValueError, match=r"VLLM_GAMMATUNE_CUDA_HOT_PATH='yes' is not allowed"):
        uses_cuda_hot_path(torch.device("cpu"))
