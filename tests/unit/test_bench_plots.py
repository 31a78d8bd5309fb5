"""gammatune_tools.bench.plots: each plot is drawn to its file (needs the
``plots`` extra of the tools, matplotlib)."""

import pytest

from gammatune_tools.bench import plots

pytest.importorskip("matplotlib")


def cell(method, k, tps, batch):
    return {"method": method, "k": k, "batch_size": batch, "temperature": 0.0,
            "tokens_per_second": tps}


def test_throughput_plots_are_written_and_one_batch_size_draws_no_lines(tmp_path):
    rows = [cell("no_spec", 0, 5.0, 1), cell("gammatune", 2, 7.0, 1), cell("gammatune", 2, 9.0, 4)]
    plots.plot_throughput(rows, tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0
    assert plots.plot_by_batch(rows, tmp_path / "b.png") and (tmp_path / "b.png").exists()
    assert not plots.plot_by_batch(rows[:2], tmp_path / "one.png")
    assert not (tmp_path / "one.png").exists()


def test_trace_and_pool_plots_are_written(tmp_path):
    steps = [{"step": i, "num_draft_tokens": 4, "num_accepted_tokens": i % 5} for i in range(6)]
    plots.plot_trace(steps, "request 0", tmp_path / "trace.png")
    pooled = [{"batch_size": 4, "method": "cost", "baseline": "no_spec",
               "ratio": (1.0, 0.9, 1.1), "ratio_after_first": None}]
    plots.plot_pool(pooled, tmp_path / "pool.png", served=False)
    assert (tmp_path / "trace.png").exists() and (tmp_path / "pool.png").exists()
