"""envs: the plugin's environment variables, read at call time, bad values
refused naming the variable."""

from __future__ import annotations

import os

import pytest

from vllm_gammatune import envs
from vllm_gammatune.compat import pin


def test_every_name_is_the_plugins(monkeypatch):
    assert all(name.startswith("VLLM_GAMMATUNE_") for name in envs.ALL)
    for name in envs.ALL:
        monkeypatch.delenv(name, raising=False)
    assert envs.settings() == dict.fromkeys(envs.ALL)


def test_cache_dir_defaults_to_the_home_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(envs.CACHE, raising=False)
    assert envs.cache_dir() == os.path.expanduser("~/.cache/vllm_gammatune")
    monkeypatch.setenv(envs.CACHE, "")
    assert envs.cache_dir() == os.path.expanduser("~/.cache/vllm_gammatune")
    monkeypatch.setenv(envs.CACHE, str(tmp_path))
    assert envs.cache_dir() == str(tmp_path)


def test_trace_path_is_none_when_unset_or_empty(monkeypatch, tmp_path):
    monkeypatch.delenv(envs.TRACE, raising=False)
    assert envs.trace_path() is None
    monkeypatch.setenv(envs.TRACE, "")
    assert envs.trace_path() is None
    monkeypatch.setenv(envs.TRACE, str(tmp_path / "t.jsonl"))
    assert envs.trace_path() == str(tmp_path / "t.jsonl")


def test_cuda_hot_path_reads_0_1_or_unset(monkeypatch):
    monkeypatch.delenv(envs.CUDA_HOT_PATH, raising=False)
    assert envs.cuda_hot_path() is None
    monkeypatch.setenv(envs.CUDA_HOT_PATH, "1")
    assert envs.cuda_hot_path() is True
    monkeypatch.setenv(envs.CUDA_HOT_PATH, "0")
    assert envs.cuda_hot_path() is False


def test_allow_untested_vllm_reads_0_1_or_unset_and_refuses_the_rest(monkeypatch):
    monkeypatch.delenv(envs.ALLOW_UNTESTED_VLLM, raising=False)
    assert not envs.allow_untested_vllm()
    monkeypatch.setenv(envs.ALLOW_UNTESTED_VLLM, "0")
    assert not envs.allow_untested_vllm()
    monkeypatch.setenv(envs.ALLOW_UNTESTED_VLLM, "1")
    assert envs.allow_untested_vllm()
    monkeypatch.setenv(envs.ALLOW_UNTESTED_VLLM, "yes")
    with pytest.raises(ValueError,
                       match=r"VLLM_GAMMATUNE_ALLOW_UNTESTED_VLLM='yes' is not allowed"):
        envs.allow_untested_vllm()


def test_the_series_pin_follows_the_variable(monkeypatch):
    monkeypatch.delenv(envs.ALLOW_UNTESTED_VLLM, raising=False)
    assert pin.is_supported(f"{pin.RUN_TESTED_VLLM_SERIES}.1")
    assert not pin.is_supported("0.31.2")
    with pytest.raises(pin.UnsupportedVllmVersionError, match=envs.ALLOW_UNTESTED_VLLM):
        pin.check_vllm_version("0.31.2")
    monkeypatch.setenv(envs.ALLOW_UNTESTED_VLLM, "1")
    assert pin.check_vllm_version("0.31.2") == "0.31.2"


def test_a_bad_value_refuses_the_methods_without_raising(monkeypatch):
    """``register()`` runs in every vLLM process: a bad setting must refuse
    the plugin's methods with a message, not break vLLM."""
    monkeypatch.setattr(pin, "installed_vllm_version", lambda: "0.31.2")
    monkeypatch.setenv(envs.ALLOW_UNTESTED_VLLM, "true")
    problems = pin.compatibility_problems()
    assert len(problems) == 1 and "VLLM_GAMMATUNE_ALLOW_UNTESTED_VLLM='true'" in problems[0]
