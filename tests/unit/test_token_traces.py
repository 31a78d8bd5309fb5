"""benchmarks/token_traces.py: labels, reliability bins, projected tokens per second."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import token_traces  # noqa: E402
from token_traces import Costs, Sample, Verification  # noqa: E402


def line(req_id: str, step: int, drafted: int, accepted: int, probs=None,
         predicted=None) -> dict:
    row = {"req_id": req_id, "step": step, "num_draft_tokens": drafted,
           "num_accepted_tokens": accepted}
    if probs is not None:
        row["token_probs"] = probs
    if predicted is not None:
        row["predicted_acceptance"] = predicted
    return row


def write_trace(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_labels_accepted_then_first_rejected_then_untested():
    assert token_traces.token_labels(5, 2) == [1, 1, 0, None, None]
    assert token_traces.token_labels(3, 3) == [1, 1, 1]
    assert token_traces.token_labels(4, 0) == [0, None, None, None]
    assert token_traces.token_labels(0, 0) == []


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


def test_requests_restart_when_step_does_not_increase(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl", [
        line("0", 1, 2, 1), line("1", 1, 2, 0), line("0", 2, 2, 2),
        line("0", 1, 2, 1),  # a second run reusing req_id "0"
    ])
    requests = [v.request for v in token_traces.read_traces([trace])]
    assert requests[0] == requests[2] != requests[3]
    assert len(set(requests)) == 3


def test_projection_samples_need_max_k_drafted_tokens_with_probs():
    verifications = [
        Verification(("a",), 3, 3, [0.9, 0.8, 0.7], None),  # accepted capped at 2
        Verification(("a",), 1, 0, [0.4], None),  # too short: censored
        Verification(("a",), 2, 1, None, None),  # no token_probs
    ]
    samples = token_traces.projection_samples(verifications, max_k=2)
    assert samples == [Sample(("a",), 2, [0.9, 0.8])]


def test_fixed_k_oracle_and_no_speculation_match_hand_computation():
    costs = Costs("cpu", T0=1.0, T1=0.5, D0=0.2, D1=0.1)
    samples = [Sample(("a",), a, [0.5, 0.5]) for a in (0, 2, 1)]
    n = len(samples)

    def tok_s(lengths):
        return token_traces.outcome(samples, lengths, costs)["tokens_per_second"]

    # step(k) = 1 + 0.5 * (1 + k) + 0.3 * k: 1.5, 2.3, 3.1
    assert tok_s([0] * n) == pytest.approx(3 / 4.5)
    assert tok_s([1] * n) == pytest.approx((1 + 2 + 2) / (3 * 2.3))
    assert tok_s([2] * n) == pytest.approx((1 + 3 + 2) / (3 * 3.1))
    assert tok_s([0, 2, 1]) == pytest.approx((1 + 3 + 2) / (1.5 + 3.1 + 2.3))
    two = token_traces.outcome(samples, [2] * n, costs)
    assert two["tokens_per_target_pass"] == pytest.approx(2.0)
    assert two["draft_passes_per_token"] == pytest.approx(6 / 6)
    assert two["mean_draft_length"] == pytest.approx(2.0)

    result = token_traces.project(samples, costs, max_k=2)
    rows = {s["strategy"]: s for s in result["strategies"]}
    assert rows["no speculation"]["relative"] == pytest.approx(1.0)
    assert rows["fixed K=1"]["relative"] == pytest.approx((5 / 6.9) / (3 / 4.5))
    assert rows["per-token oracle"]["tokens_per_second"] == pytest.approx(6 / 6.9)
    assert result["best_fixed_k"] == 1  # 5 / 6.9 > 6 / 9.3
    assert result["oracle_vs_best_fixed"] == pytest.approx((6 / 6.9) / (5 / 6.9))


def random_samples(num: int, max_k: int, seed: int = 0) -> list[Sample]:
    rng = random.Random(seed)
    samples = []
    for j in range(num):
        probs = [rng.uniform(0.05, 0.99) for _ in range(max_k)]
        accepted = 0
        while accepted < max_k and rng.random() < probs[accepted]:
            accepted += 1
        samples.append(Sample((0, str(j % 4), 0), accepted, probs))
    return samples


@pytest.mark.parametrize("c", [3.0, 10.0, 20.0])
def test_per_token_oracle_beats_every_fixed_k_on_gpu_like_costs(c):
    max_k = 6
    samples = random_samples(300, max_k)
    (costs,) = token_traces.cost_structures(None, [c])
    result = token_traces.project(samples, costs, max_k)
    rows = {s["strategy"]: s["tokens_per_second"] for s in result["strategies"]}
    for K in range(1, max_k + 1):
        assert rows["per-token oracle"] >= rows[f"fixed K={K}"]
    assert result["oracle_vs_best_fixed"] >= 1.0


def test_per_request_oracle_takes_each_requests_best_static_choice():
    """One request the draft always gets right, one it never does: the
    oracle drafts the cap for the first and nothing for the second, and is
    at least as fast as any one choice for both."""
    max_k = 4
    costs = Costs("cpu-like", 1.0, 0.0, 0.3, 0.0)
    easy = [Sample(("easy",), max_k, [0.99] * max_k) for _ in range(10)]
    hard = [Sample(("hard",), 0, [0.2] * max_k) for _ in range(10)]
    lengths = token_traces.per_request_best(easy + hard, costs, max_k)
    assert lengths == [max_k] * 10 + [0] * 10
    oracle = token_traces.outcome(easy + hard, lengths, costs)["tokens_per_second"]
    for k in range(max_k + 1):
        static = token_traces.outcome(easy + hard, [k] * 20, costs)["tokens_per_second"]
        assert oracle >= static


def test_rule_lengths_stay_within_cap_and_follow_acceptance():
    max_k = 5
    costs = Costs("gpu-like", 1.0, 0.0, 0.1, 0.0)
    confident = [Sample(("a",), max_k, [0.97] * max_k) for _ in range(40)]
    hopeless = [Sample(("b",), 0, [0.1] * max_k) for _ in range(40)]
    mixed = random_samples(200, max_k, seed=1)
    for samples in (confident, hopeless, mixed):
        lengths, passes = token_traces.rule_lengths(samples, costs, rate=2.0, max_k=max_k)
        assert len(lengths) == len(passes) == len(samples)
        assert all(0 <= k <= max_k and k <= run <= k + 1 for k, run in zip(lengths, passes))
    long, _ = token_traces.rule_lengths(confident, costs, rate=2.0, max_k=max_k)
    short, _ = token_traces.rule_lengths(hopeless, costs, rate=2.0, max_k=max_k)
    assert sum(long) > sum(short)

    lengths, passes, rates = token_traces.rule_fixed_point(mixed, costs, 2.0, max_k)
    assert len(rates) == token_traces.RATE_ITERATIONS + 1 and rates[0] == 2.0
    assert rates[-1] == pytest.approx(
        token_traces.outcome(mixed, lengths, costs, passes)["tokens_per_second"])
    # a token drafted and left unverified costs its pass
    dropped = token_traces.outcome(mixed[:1], [0], costs, [1])
    assert dropped["tokens_per_second"] < token_traces.outcome(mixed[:1], [0], costs)[
        "tokens_per_second"]


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
        [sys.executable, str(REPO / "benchmarks" / "token_traces.py"), str(first), str(second),
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
