"""benchmarks.token_traces: reliability bins, decode cycles, the command."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from bench_fixtures import trace_line as line
from bench_fixtures import write_jsonl as write_trace

from benchmarks import token_traces
from gammatune_tools.bench.traces import Verification

REPO = Path(__file__).resolve().parents[2]


def test_labelled_predictions_skip_untested_tokens_and_missing_fields():
    verifications = [
        Verification(("a",), 4, 1, [0.9, 0.2, 0.7, 0.6], [0.8, 0.3, 0.5, 0.5]),
        Verification(("a",), 2, 2, [0.6, 0.5], None),
        Verification(("b",), 3, 0, None, None),
    ]
    assert token_traces.labelled_predictions(verifications, "token_probs") == [
        (0.9, 1), (0.2, 0), (0.6, 1), (0.5, 1)]
    assert token_traces.labelled_predictions(verifications, "predicted_acceptance") == [
        (0.8, 1), (0.3, 0)]


def test_reliability_bins_brier_and_log_loss_by_hand():
    pairs = [(0.05, 0), (0.15, 1), (0.15, 0), (0.95, 1), (1.0, 1)]
    result = token_traces.reliability(pairs)
    assert result["tokens"] == 5
    assert [(b["low"], b["tokens"]) for b in result["bins"]] == [(0.0, 1), (0.1, 2), (0.9, 2)]
    assert [b["mean_prediction"] for b in result["bins"]] == pytest.approx([0.05, 0.15, 0.975])
    assert [b["observed"] for b in result["bins"]] == pytest.approx([0.0, 0.5, 1.0])
    assert result["brier"] == pytest.approx(
        (0.05 ** 2 + 0.85 ** 2 + 0.15 ** 2 + 0.05 ** 2 + 0.0) / 5)
    assert result["log_loss"] == pytest.approx(
        -(math.log(0.95) + math.log(0.15) + math.log(0.85) + math.log(0.95)
          + math.log(1 - 1e-4)) / 5)
    assert token_traces.reliability([]) == {"tokens": 0, "bins": [], "brier": None,
                                            "log_loss": None}


def plan(kind: str, scheduled: int, previous_cycle: float | None, batch_size: int = 1,
         has_prefill: bool = False, catch_up: int = 0) -> dict:
    return {"event": "plan", "kind": kind, "batch_size": batch_size,
            "num_scheduled_tokens": scheduled, "has_prefill": has_prefill,
            "catch_up_tokens": catch_up, "previous_cycle_seconds": previous_cycle,
            "step_costs": [0.1, 0.01, 0.04, 0.001]}


def test_cycles_pair_each_drafting_plan_with_the_next_plans_reading(tmp_path):
    """A drafting plan's cycle is read at the next plan, whose scheduled
    tokens say how many draft tokens were kept; skips, prompt chunks,
    catch-ups and other batch sizes are left out."""
    rows = [plan("draft", 1, None),
            plan("draft", 4, 0.30),  # kept 3 of the first plan
            plan("skip", 3, 0.25),  # kept 2 of the second
            plan("draft", 1, 0.11),  # after a skip: not a drafting cycle
            plan("draft", 2, None, has_prefill=True),  # the next step is a prompt chunk
            plan("draft", 1, 0.20, catch_up=5),
            plan("draft", 9, 0.50, batch_size=2),
            line("0", 1, 3, 2)]
    cycles = token_traces.read_cycles([write_trace(tmp_path / "t.jsonl", rows)])
    assert [(c.kept, c.measured_seconds) for c in cycles] == [(3, 0.30), (2, 0.25)]
    # T0 + T1 (1 + k) + D0 + D1 (s + 1) + (k - 1) (D0 + D1), s = 1 then 4
    assert cycles[0].model_seconds == pytest.approx(0.1 + 0.04 + 0.04 + 0.002 + 2 * 0.041)
    assert cycles[1].model_seconds == pytest.approx(0.1 + 0.03 + 0.04 + 0.005 + 0.041)
    by_length = token_traces.cycles_by_length(cycles + [token_traces.Cycle(3, 0.40, 0.2)])
    assert [(r["kept"], r["cycles"]) for r in by_length] == [(2, 1), (3, 2)]
    assert by_length[1]["measured_seconds"] == pytest.approx(0.35)
    assert by_length[1]["measured_over_model"] == pytest.approx(
        0.35 / ((cycles[0].model_seconds + 0.2) / 2))


def test_cli_writes_markdown_and_json_and_skips_event_lines(tmp_path):
    rows = [
        {"event": "plan", "req_id": "0", "num_draft_tokens": 99, "lengths": [3]},
        line("0", 1, 3, 1, [0.9, 0.3, 0.8], [0.85, 0.4, 0.7]),
        line("0", 2, 3, 3, [0.95, 0.9, 0.9], [0.9, 0.8, 0.8]),
        line("1", 1, 2, 0, [0.2, 0.6]),  # too short for max-k 3
        line("1", 2, 3, 2),  # an old line without token_probs
    ]
    first = write_trace(tmp_path / "a.jsonl", rows[:3])
    second = write_trace(tmp_path / "b.jsonl", rows[3:])
    with second.open("a") as f:
        f.write('{"req_id": "1", "step": 3, "num_dr')  # a line cut short
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.token_traces", str(first), str(second),
         "--out", str(out), "--max-k", "3", "--cpu-costs", "0.05,0.002,0.01,0.0005",
         "--cost-ratios", "10"],
        cwd=REPO, capture_output=True, text=True, check=True)
    markdown = (out / "token_traces.md").read_text()
    assert markdown.strip() == done.stdout.strip()
    assert "cpu (measured costs)" in markdown and "gpu-like, c=10" in markdown
    assert "renewal approximation" in markdown.lower()
    result = json.loads((out / "token_traces.json").read_text())
    assert result["counts"] == {"verification_lines": 4, "projection_lines": 2,
                                "labelled_tokens": 2 + 3 + 1 + 3, "requests": 2}
    assert result["reliability"]["predicted_acceptance"]["tokens"] == 2 + 3
    assert result["reliability"]["token_probs"]["tokens"] == 2 + 3 + 1
    assert [p["name"] for p in result["projections"]] == ["cpu (measured costs)",
                                                           "gpu-like, c=10"]
    strategies = [s["strategy"] for s in result["projections"][0]["strategies"]]
    assert strategies == ["no speculation", "fixed K=1", "fixed K=2", "fixed K=3",
                          "per-request oracle", "per-token oracle", "rule (gammatune_cost)"]
