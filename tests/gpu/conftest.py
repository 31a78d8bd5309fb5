"""The GPU tier's engines (``engines``, from ``gpu_engines.RUNS``) and its
measurements: recorded, printed in the pytest summary, and written beside the
GPU table's run, so one folder holds what a GPU run sends back.

Tests add ``{name: value}`` to the ``gpu_measurements`` fixture. At the end
of the session the summary prints them under "GPU measurements" and they go
to ``$VLLM_GAMMATUNE_GPU_REPORT`` (default ``benchmarks/runs/gpu/pytest_gpu.json``)
with the GPU's name and the vLLM version.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEFAULT_REPORT = REPO / "benchmarks" / "runs" / "gpu" / "pytest_gpu.json"

_MEASUREMENTS: dict = {}


@pytest.fixture(scope="session")
def gpu_measurements() -> dict:
    return _MEASUREMENTS


@pytest.fixture(scope="session")
def engines(tiny_models):
    """``engines(name)``: the results of ``gpu_engines.RUNS[name]``, its engine
    started once a session (the only way a test here gets an engine)."""
    from gpu_engines import engine_result

    return lambda name: engine_result(name, tiny_models)


def pytest_terminal_summary(terminalreporter) -> None:
    if not _MEASUREMENTS:
        return
    import torch
    import vllm

    report = {"gpu": torch.cuda.get_device_name(0), "vllm": vllm.__version__,
              "measurements": _MEASUREMENTS}
    path = Path(os.environ.get("VLLM_GAMMATUNE_GPU_REPORT") or DEFAULT_REPORT)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    terminalreporter.write_sep("-", f"GPU measurements ({report['gpu']}, vLLM {report['vllm']})")
    for name, value in _MEASUREMENTS.items():
        terminalreporter.write_line(f"{name}: {json.dumps(value)}")
    terminalreporter.write_line(f"written to {path}")
