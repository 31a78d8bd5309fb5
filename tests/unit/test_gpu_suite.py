"""``python -m benchmarks.gpu_suite``: its cells, its graph-mode counter and its table (no GPU)."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from benchmarks import gpu_suite
from gammatune_tools.bench.records import Measurement, append_row

REPO = Path(__file__).resolve().parents[2]

#: the published design's engines, in order, with the runner variable each sets
ENGINES = [("no_spec", None), ("vllm_draft_model[v1]", "0"), ("vllm_draft_model[v2]", "1"),
           ("vllm_draft_model[v2_adaptive]", "1"), ("gammatune", None),
           ("gammatune_cost@8", None)]


def _dry_run(capsys, *extra: str) -> list[str]:
    assert gpu_suite.main(["--out", "unused", "--dry-run", *extra]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_dry_run_lists_every_engine_at_batch_1_8_and_32(capsys):
    lines = _dry_run(capsys)
    assert len(lines) == len(ENGINES) * 3
    for i, (engine, runner) in enumerate(ENGINES):
        for line, size in zip(lines[3 * i: 3 * i + 3], (1, 8, 32)):
            assert line.split()[0] == engine and f"b={size} " in line, line
            assert (f"VLLM_USE_V2_MODEL_RUNNER={runner}" in line) == (runner is not None), line
            assert "skipped" not in line
    assert '"enable_adaptive_verification": true' in lines[9]
    assert '"method": "gammatune", "model": "{draft}", "num_speculative_tokens": 16' in lines[12]
    assert '"method": "gammatune_cost", "model": "{draft}", "num_speculative_tokens": 8' in lines[15]


def test_adaptive_verification_cells_are_skipped_where_vllm_lacks_the_field():
    engines = gpu_suite.plan_engines(["vllm_draft_model"], list(gpu_suite.VLLM_RUNNERS), "/d",
                                     4, 16, adaptive_verification=False)
    assert [e.skipped is None for e in engines] == [True, True, False]
    line = gpu_suite.cell_line(engines[2], 8, 0.0)
    assert "skipped: the installed vLLM's SpeculativeConfig has no enable_adaptive_verification" in line


def test_a_plugin_method_runs_on_the_path_its_entry_names():
    host, hot, default = gpu_suite.plan_engines(
        ["gammatune_cost+host", "gammatune_cost@8+hot", "gammatune"], ["v1"], "/d", 4, 16, True)
    assert host.env == {"VLLM_GAMMATUNE_CUDA_HOT_PATH": "0"} and host.k == 4
    assert hot.env == {"VLLM_GAMMATUNE_CUDA_HOT_PATH": "1"} and hot.k == 8
    assert hot.spec["num_speculative_tokens"] == 8
    assert default.env == {}  # the plugin's default: the hot path on CUDA


def test_unknown_runners_and_methods_name_the_allowed_values():
    with pytest.raises(ValueError, match=r"--vllm-runners: unknown \['v3'\]; allowed: v1, v2"):
        gpu_suite.plan_engines(["vllm_draft_model"], ["v3"], "/d", 4, 16, True)
    with pytest.raises(ValueError, match="--methods: unknown 'gamatune'"):
        gpu_suite.plan_engines(["gamatune"], ["v1"], "/d", 4, 16, True)


def test_reproduce_gpu_dry_run_prints_the_command_and_its_cells():
    result = subprocess.run([sys.executable, "-m", "benchmarks.reproduce", "gpu", "--dry-run"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stderr[-3000:]
    assert " -m benchmarks.gpu_suite --out " in lines[0] and "runs/gpu " in lines[0]
    assert [line.split()[0] for line in lines[1:]] == [e for e, _ in ENGINES for _ in range(3)]


class _Manager:
    """The stat-logger manager's ``record``, as the engine calls it each step."""

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
        return scheduler_stats


def test_graph_modes_are_counted_from_each_steps_scheduler_stats():
    from vllm.compilation.cuda_graph import CUDAGraphStat
    from vllm.v1.metrics.stats import SchedulerStats

    llm = types.SimpleNamespace(llm_engine=types.SimpleNamespace(logger_manager=_Manager()))
    modes = gpu_suite.CudaGraphModes(llm)
    record = llm.llm_engine.logger_manager.record
    for mode in ("FULL", "PIECEWISE", "FULL"):
        stat = CUDAGraphStat(num_unpadded_tokens=5, num_padded_tokens=8, num_paddings=3,
                             runtime_mode=mode)
        record(scheduler_stats=SchedulerStats(cudagraph_stats=stat), iteration_stats=None)
    before = modes.snapshot()
    assert before == {"FULL": 2, "PIECEWISE": 1}
    record(SchedulerStats(), None)  # an engine without cudagraph_metrics reports none
    record(SchedulerStats(cudagraph_stats=stat), None)
    assert gpu_suite.CudaGraphModes.difference(before, modes.snapshot()) == {
        "FULL": 1, "PIECEWISE": 0}


def _row(engine: str, size: int, seconds: float, steps: dict, v2: bool, accepted: float) -> dict:
    measured = Measurement(method=engine, k=4, batch_size=size, num_requests=8,
                           output_tokens=1000, wall_seconds=seconds, drafts=400,
                           draft_tokens=1600 if accepted else 0, accepted=accepted,
                           confidence_stops=0, draft_forward_passes=0, relaxed_acceptances=0,
                           plugin_time_us=0)
    return {"key": engine, "engine": engine, "v2_model_runner": v2, "async_scheduling": v2,
            "cudagraph_steps": steps, **measured.to_dict()}


def test_the_report_gives_ratios_to_no_speculation_and_graph_shares(tmp_path):
    append_row(tmp_path / "cells.jsonl", _row("no_spec", 8, 10.0, {"FULL": 90, "NONE": 10},
                                              True, 0))
    append_row(tmp_path / "cells.jsonl", _row("gammatune", 8, 5.0, {"FULL": 25, "PIECEWISE": 75},
                                              False, 600))
    append_row(tmp_path / "errors.jsonl", {"engine": "vllm_draft_model[v2_adaptive]",
                                           "error": "ValueError('no varlen graphs')"})
    context = {"gpu": "NVIDIA H100 80GB HBM3", "vllm": "0.33.0", "torch_cuda": "12.9"}
    text = gpu_suite.write_report(tmp_path, context).read_text()
    assert text.startswith("# GPU table: NVIDIA H100 80GB HBM3") and "vLLM 0.33.0" in text
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in text.splitlines()
            if line.startswith("| ") and "engine" not in line}
    assert rows["gammatune"][1:5] == ["V1", "off", "200.0", "2.000"]
    assert rows["gammatune"][6] == "2.50"  # accepted length: 1 + 600 / 400
    assert rows["gammatune"][9:] == ["25%", "75%", "100 |"]
    assert rows["no_spec"][1:5] == ["V2", "on", "100.0", "1.000"]
    assert "`vllm_draft_model[v2_adaptive]`: ValueError('no varlen graphs')" in text
    assert json.loads((tmp_path / "cells.jsonl").read_text().splitlines()[0])["engine"] == "no_spec"
