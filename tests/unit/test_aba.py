"""benchmarks.diagnostics.aba: each run against the baseline runs around it."""

import json

from benchmarks.diagnostics import aba


def test_aba_compares_each_run_with_the_baseline_runs_around_it(tmp_path):
    def write(run, method, started, tps):
        (tmp_path / run).mkdir()
        (tmp_path / run / "cells.jsonl").write_text(json.dumps(
            {"method": method, "started": started, "batch_size": 4,
             "tokens_per_second": tps}) + "\n")

    write("a1", "no_spec", 1.0, 20.0)
    write("b1", "cost", 2.0, 22.0)  # neighbours 20 and 24: 22 / 22 = 1.0, [22/24, 22/20]
    write("a2", "no_spec", 3.0, 24.0)
    write("b2", "cost", 4.0, 18.0)  # neighbours 24 and 16: 18 / 20 = 0.9
    write("a3", "no_spec", 5.0, 16.0)
    text = aba.report(tmp_path, "no_spec")
    run_b1 = next(line for line in text.splitlines() if "| b1 |" in line)
    assert "| 1.000 | [0.917, 1.100] |" in run_b1
    run_b2 = next(line for line in text.splitlines() if "| b2 |" in line)
    assert "| 0.900 | [0.750, 1.125] |" in run_b2
    summary = next(line for line in text.splitlines() if "| cost | 22.00, 18.00 |" in line)
    # method mean 20 over baseline mean 20; per-run ratios in order; baseline spread 50%
    assert "| 1.000 | 1.000, 0.900 |" in summary and "16.00-24.00 (50%)" in summary
    # mean ratio 0.95, sd 0.0707 over 2 runs: t(0.975, 1) = 12.706, half 0.635
    assert "| 0.950 [0.315, 1.585] |" in summary


