"""``vllm-gammatune doctor`` on this machine, with the tiny models."""

from __future__ import annotations

import os
import subprocess
import sys


def _doctor(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vllm_gammatune.cli", "doctor", *args],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", **(env or {})})


def test_doctor_confirms_the_drafter_the_worker_built(tiny):
    result = _doctor("--target", tiny["target"], "--draft", tiny["draft"])
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-3000:]
    assert "PASS vLLM internals" in out and "PASS patches applied" in out
    assert "PASS runner for 'gammatune' (Triton absent): V1 model runner" in out
    assert "PASS runner for 'draft_model' (Triton absent): V1 model runner" in out
    assert "PASS engine with 'gammatune': gammatune on the v1 runner, drafter " \
           "AdaptiveDraftModelProposer" in out
    assert "FAIL" not in out
    assert out.rstrip().endswith("vllm-gammatune doctor: all checks passed")


def test_doctor_shows_the_cuda_decision_and_fails_when_v2_is_forced(tiny):
    cuda = _doctor("--target", tiny["target"], "--draft", tiny["draft"], "--assume-triton")
    assert cuda.returncode == 0, cuda.stdout + cuda.stderr[-3000:]
    assert "PASS runner for 'gammatune_cost' (Triton present): V1 model runner" in cuda.stdout
    assert "PASS runner for 'draft_model' (Triton present): Model Runner V2" in cuda.stdout

    forced = _doctor("--target", tiny["target"], "--draft", tiny["draft"],
                     env={"VLLM_USE_V2_MODEL_RUNNER": "1"})
    assert forced.returncode == 1
    assert "FAIL runner for 'gammatune' (Triton absent): GammaTuneConfigError: " \
           "VLLM_USE_V2_MODEL_RUNNER=1 forces vLLM's Model Runner V2" in forced.stdout
    assert "FAIL engine with 'gammatune'" in forced.stdout
    assert "check(s) failed" in forced.stdout


def test_doctor_refuses_bad_arguments():
    result = _doctor("--target", "somewhere")
    assert result.returncode == 2 and "--target and --draft go together" in result.stderr
    result = _doctor("--method", "gammatune_pls")
    assert result.returncode == 2
    assert "--method: 'gammatune_pls' is not a vllm-gammatune method" in result.stderr
