"""``python -m benchmarks.gpu_suite``: its cells, its graph-mode counter, its table, its
models and processes, and the GPU commands' time budget (``gammatune_tools.bench.gpu_budget``; no GPU)."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest

from benchmarks import gpu_suite
from gammatune_tools.bench import gpu_budget
from gammatune_tools.bench.records import Measurement, append_row

REPO = Path(__file__).resolve().parents[2]
GPU_TESTS = REPO / "tests" / "gpu"

#: the published design's engines, in order, with the runner variable each sets
ENGINES = [("no_spec", None), ("vllm_draft_model[v1]", "0"), ("vllm_draft_model[v2]", "1"),
           ("vllm_draft_model[v2_adaptive]", "1"), ("gammatune", None),
           ("gammatune_cost@4", None)]


def _dry_run(capsys, *extra: str) -> list[str]:
    """The dry run's cell lines (its last line, ``# budget ...``, left out)."""
    assert gpu_suite.main(["--out", "unused", "--dry-run", *extra]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("# budget on one H100: 6 engines x 90 s + "), lines[-1]
    return lines[:-1]


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
    assert '"method": "gammatune_cost", "model": "{draft}", "num_speculative_tokens": 4' in lines[15]


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
    assert [line.split()[0] for line in lines[1:-1]] == [e for e, _ in ENGINES for _ in range(3)]
    assert lines[-1].startswith("# budget on one H100: ")


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
                           plugin_time_us=0, target_passes=1000 - accepted)
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
    assert rows["gammatune"][6] == "2.50"  # accepted length: 1 + 600 / 400 (all within)
    assert rows["gammatune"][9:] == ["25%", "75%", "100 |"]
    assert rows["no_spec"][1:5] == ["V2", "on", "100.0", "1.000"]
    assert "`vllm_draft_model[v2_adaptive]`: ValueError('no varlen graphs')" in text
    assert json.loads((tmp_path / "cells.jsonl").read_text().splitlines()[0])["engine"] == "no_spec"


def _model_dirs(root: Path) -> list[str]:
    for role in ("target", "draft"):
        (root / role).mkdir()
        (root / role / "config.json").write_text("{}")
    return ["--target", str(root / "target"), "--draft", str(root / "draft")]


def test_the_models_are_read_from_disk_and_checked_before_anything(tmp_path):
    with pytest.raises(SystemExit, match="--target: required: the directory of a model"):
        gpu_suite.main(["--out", str(tmp_path)])
    missing = tmp_path / "nowhere"
    with pytest.raises(SystemExit, match=re.escape(f"--target {missing}: no such directory")):
        gpu_suite.main(["--out", str(tmp_path), "--target", str(missing), "--draft", "x"])
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text("{}")
    with pytest.raises(SystemExit, match=re.escape(
            f"--draft {tmp_path}: not a Hugging Face model directory (no config.json)")):
        gpu_suite.main(["--out", str(tmp_path), "--target", str(tmp_path / "target"),
                        "--draft", str(tmp_path), "--dry-run"])


def test_each_engine_runs_in_its_own_process_and_the_suite_opens_no_cuda_context(
        tmp_path, monkeypatch):
    """An engine's GPU memory is freed when its process exits; the suite's own
    process must hold none (no CUDA context) while the engines run."""
    import torch

    from gammatune_tools.bench import context

    def no_cuda(*args, **kwargs):
        raise AssertionError("the suite's own process touched CUDA")

    for name in ("_lazy_init", "init", "get_device_name", "get_device_properties",
                 "current_device", "mem_get_info", "synchronize"):
        monkeypatch.setattr(torch.cuda, name, no_cuda)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(context, "git_commit", lambda: None)
    calls = []
    monkeypatch.setattr(gpu_suite.subprocess, "call",
                        lambda command, env: calls.append((command, env)) or 0)
    out = tmp_path / "out"
    assert gpu_suite.main(["--out", str(out), *_model_dirs(tmp_path)]) == 0
    assert [command[command.index("--engine") + 1] for command, _ in calls] == [
        engine for engine, _ in ENGINES]
    assert all(command[:3] == [sys.executable, "-m", "benchmarks.gpu_suite"]
               for command, _ in calls)
    assert [env.get("VLLM_USE_V2_MODEL_RUNNER") for _, env in calls] == [
        runner for _, runner in ENGINES]
    assert (out / "report.md").exists() and json.loads((out / "context.json").read_text())[
        "target"] == str(tmp_path / "target")


def test_the_quick_plan_keeps_the_design_and_fits_its_budget():
    """``reproduce gpu --quick``: the published design's engines and batch sizes at
    a smaller size, within 12 minutes on one H100, counted pessimistically."""
    from benchmarks import reproduce

    full, quick = (gpu_suite.parse_args(reproduce.plan("gpu", quick=q)[0]["argv"][3:])
                   for q in (False, True))
    for key in ("methods", "vllm_runners", "k", "cap", "batch_sizes", "temperature",
                "dataset", "split"):
        assert getattr(quick, key) == getattr(full, key), key
    engines = gpu_suite.plan_engines(quick.methods.split(","), quick.vllm_runners.split(","),
                                     "/d", int(quick.k), quick.cap, adaptive_verification=True)
    budget = gpu_suite.plan_budget(quick, engines)
    assert budget.engines == len(ENGINES)
    assert budget.steps == len(ENGINES) * gpu_budget.suite_engine_steps(
        [1, 8, 32], quick.limit, quick.max_tokens)
    assert budget.seconds <= gpu_budget.LIMIT_S["gpu_suite --quick"], budget.line()


def _load(name: str):
    """A module of tests/gpu, loaded by path (tests/gpu is not on this tier's path)."""
    key = f"_gpu_tier_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, GPU_TESTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[key]


def test_pytest_m_gpu_fits_its_budget():
    engines = _load("gpu_engines")
    budget = gpu_budget.pytest_budget([run.workloads for run in engines.RUNS.values()],
                                      engines.ENGINE_KWARGS["max_num_seqs"],
                                      len(engines.PROMPTS))
    assert budget.engines == len(engines.RUNS)
    assert budget.seconds <= gpu_budget.LIMIT_S["pytest -m gpu"], budget.line()


#: what starts an engine or a process: in tests/gpu, only the registry and its probe
ENGINE_STARTERS = {"LLM", "AsyncLLM", "LLMEngine", "start_llm", "running_engine",
                   "subprocess", "Popen", "multiprocessing"}


def test_only_the_registry_starts_engines_in_the_gpu_tier():
    wrong = []
    for path in sorted(GPU_TESTS.glob("*.py")):
        if path.name in ("gpu_engines.py", "engine_probe.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            name = (node.id if isinstance(node, ast.Name) else
                    node.attr if isinstance(node, ast.Attribute) else
                    node.name.split(".")[0] if isinstance(node, ast.alias) else None)
            if name in ENGINE_STARTERS:
                wrong.append(f"{path.name}:{node.lineno}: {name}")
    assert not wrong, "engines started outside gpu_engines.RUNS:\n  " + "\n  ".join(wrong)


def test_pytest_m_gpu_reads_every_registered_engine_and_no_other():
    """Its tests name their engines in their parameters; the lossless tests
    also read the references (the target and the draft alone)."""
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu",
                             "-p", "no:cacheprovider", "tests/gpu"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    ids = [line for line in result.stdout.splitlines() if "::" in line]
    assert result.returncode == 0 and ids, result.stdout[-3000:] + result.stderr[-3000:]
    used = {line.rpartition("[")[2].rstrip("]") for line in ids if line.endswith("]")}
    runs = set(_load("gpu_engines").RUNS)
    assert used <= runs, used - runs
    assert used | {"target", "draft"} == runs


def test_the_probe_records_what_vllms_sync_check_reports_in_warn_mode(monkeypatch):
    """vLLM's check in ``warn`` mode, as it runs on CUDA (its arming of torch's
    sync debug mode stubbed here): a sync in a checked step reaches the probe's
    record; one outside, or inside ``gpu_sync_allowed()``, does not."""
    import torch
    from vllm.utils import gpu_sync_debug

    probe = _load("engine_probe")
    monkeypatch.setattr(gpu_sync_debug, "_SYNC_CHECK_MODE", "warn")
    monkeypatch.setattr(gpu_sync_debug, "_sync_check_enabled", True)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: None)
    torch_text = getattr(gpu_sync_debug, "_TORCH_SYNC_WARNING", probe.SYNC_TEXTS[0])
    assert torch_text == probe.SYNC_TEXTS[0]
    assert probe.SYNC_TEXTS[1] in gpu_sync_debug.IMPLICIT_SYNC_ERROR_MESSAGE

    def syncing():  # what torch says of a sync while vLLM's check has armed it
        warnings.warn(f"x.item() {torch_text}", UserWarning)

    def copying():  # vLLM's own report of a non_blocking copy that syncs
        gpu_sync_debug._report_implicit_sync("copy_", "D2H", "not pinned", "warn")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gpu_sync_debug.with_gpu_sync_check(syncing)()
        gpu_sync_debug.with_gpu_sync_check(copying)()
        syncing()
        with gpu_sync_debug.gpu_sync_allowed():
            gpu_sync_debug.with_gpu_sync_check(syncing)()
        reported = probe.sync_warnings(caught)
    assert len(reported) == 2, reported
    assert torch_text in reported[0] and "Implicit GPU<->CPU sync" in reported[1]
