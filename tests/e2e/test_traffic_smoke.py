"""``python -m benchmarks.run_traffic`` on the tiny models: two fresh servers (no
speculation, traced ``gammatune_cost``), one round of quiet, busy and quiet
again through vLLM's own client, and the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gammatune_tools.bench.traffic_decisions import plan_series

REPO = Path(__file__).resolve().parents[2]
MAX_TOKENS = 12
PHASES = "quiet:1:2,busy:4:4,quiet_again:1:2"


def test_one_round_of_the_trace_on_two_servers(tiny, tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the servers' real, spawned layout
    env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.run_traffic", "--out", str(out),
         "--logs", str(tmp_path / "logs"), "--target", tiny["target"], "--draft", tiny["draft"],
         "--dtype", "float32", "--max-model-len", "1024", "--methods", "no_spec,gammatune_cost@4",
         "--kinds", "code=coding,math=math,long=extraction", "--phases", PHASES,
         "--max-tokens", str(MAX_TOKENS), "--rounds", "1", "--trace"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    rows = [json.loads(line) for line in (out / "traffic.jsonl").read_text().splitlines()]
    assert sorted((r["choice"], r["phase"]) for r in rows) == sorted(
        (c, p) for c in ("no_spec", "gammatune_cost@4") for p in ("quiet", "busy", "quiet_again"))
    for row in rows:  # the same fixed work on every server, every request completed
        assert (row["completed"], row["failed"]) == (row["num_requests"], 0)
        assert row["total_output_tokens"] == row["num_requests"] * MAX_TOKENS
        assert len(row["ttft_ms"]) == row["num_requests"]
    cost = sorted((r for r in rows if r["choice"] == "gammatune_cost@4"),
                  key=lambda r: r["phase_index"])
    assert all(r["decisions"] is None for r in rows if r["choice"] == "no_spec")
    # the phases' trace ranges follow each other, and each holds one plan
    # line per step the plugin counted in that phase
    assert [r["trace_bytes"][1] for r in cost[:-1]] == [r["trace_bytes"][0] for r in cost[1:]]
    assert [r["decisions"]["plan_steps"] for r in cost] == [
        r["metrics_delta"]["gammatune_steps"] for r in cost]
    busy = plan_series(out / cost[1]["trace_file"], cost)[1]
    assert max(plan["batch_size"] for plan in busy) > 1
    page = (out / "traffic.md").read_text()
    assert "## Whole trace" in page and "## Phase busy" in page
    assert "## gammatune_cost@4 against each static choice" in page
    summary = json.loads((out / "traffic_summary.json").read_text())
    assert summary["rounds"] == [0] and summary["best_static"]["whole"] == "no_spec"
