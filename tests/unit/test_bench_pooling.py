"""gammatune_tools.bench.pooling: the rounds of several paired runs as one set."""

import pytest
from bench_fixtures import run_folder

from gammatune_tools.bench import pooling


def test_pool_joins_rounds_of_both_start_orders_and_drops_first_rounds():
    def summary(*ratios):
        return [{"batch_size": 4, "method": "no_spec", "ratios": [1.0] * len(ratios)},
                {"batch_size": 4, "method": "cost", "ratios": list(ratios),
                 "batch_ratios": [r + d for r in ratios for d in (-0.05, 0.05)]}]

    pooled = pooling.pool([("fwd", "no_spec", summary(0.8, 1.0, 1.1)),
                           ("rev", "no_spec", summary(0.9, 1.1, 0.9))])
    (row,) = pooled
    assert (row["batch_size"], row["method"], row["rounds"]) == (4, "cost", 6)
    mean, low, high = row["ratio"]  # 5.8 / 6
    assert mean == pytest.approx(0.9667, abs=1e-4) and low < mean < high
    # without 0.8 and 0.9 (each run's first round): 1.0, 1.1, 1.1, 0.9
    assert row["rounds_after_first"] == 4
    assert row["ratio_after_first"][0] == pytest.approx(1.025)
    assert [(name, n) for name, n, _ in row["runs"]] == [("fwd", 3), ("rev", 3)]
    # two batches per round, each one observation: 12, the same mean
    assert row["batches"] == 12 and row["batch_ratio"][0] == pytest.approx(mean)
    assert row["batch_ratio"][2] - row["batch_ratio"][1] < high - low
    text = pooling.pool_report(pooled)
    assert "| 4 | cost | fwd (3, 0.967); rev (3, 0.967) | 6 | 0.967 [" in text
    with pytest.raises(ValueError, match="different baselines \\(gammatune, no_spec\\)"):
        pooling.pool([("a", "no_spec", summary(1.0)), ("b", "gammatune", summary(1.0))])


def test_pool_reads_served_runs_of_both_start_orders(tmp_path):
    def served_run(name, methods, baseline, durations):
        """durations: per round, (no_spec seconds, cost seconds) at concurrency 4."""
        rows = [{"method": method, "round": round_index, "position": position,
                 "concurrency": 4, "duration": seconds,
                 "total_output_tokens": 1000, "metrics_delta": {}}
                for round_index, (base, cost) in enumerate(durations)
                for position, (method, seconds) in enumerate([("no_spec", base),
                                                              ("cost", cost)])]
        return run_folder(tmp_path / name, methods, baseline, rows, "serve_cells.jsonl")

    a = served_run("a", "no_spec,cost", None, [(50, 40), (50, 50)])
    b = served_run("b", "cost,no_spec", "no_spec", [(45, 50)])
    assert [pooling.read_run(d)[:2] for d in (a, b)] == [("a", "no_spec"), ("b", "no_spec")]
    (row,), served = pooling.pool_directories([a, b])
    assert served
    # ratios 1.25, 1.0 (a) and 0.9 (b): the served rounds pool like offline ones
    assert (row["batch_size"], row["method"], row["rounds"]) == (4, "cost", 3)
    assert row["ratio"][0] == pytest.approx((1.25 + 1.0 + 0.9) / 3)
    assert row["ratio_after_first"][0] == pytest.approx(1.0)
    # an offline run (paired.jsonl) is never pooled with served ones
    offline = tmp_path / "offline"
    offline.mkdir()
    (offline / "paired.jsonl").write_text("")
    with pytest.raises(ValueError, match="pool offline .* and served .* runs separately"):
        pooling.pool_directories([a, offline])
