"""gammatune_tools.bench.traffic_plot: the client's throughput line over a
trace, and the plot drawn (needs the tools' ``plots`` extra, matplotlib)."""

import pytest

from gammatune_tools.bench import traffic_plot


def test_the_moving_mean_averages_what_it_has_at_the_start():
    assert traffic_plot.moving_mean([2.0, 4.0, 6.0, 8.0], 2) == [2.0, 3.0, 5.0, 7.0]
    assert traffic_plot.moving_mean([], 5) == []


def test_the_throughput_line_follows_the_phases_without_their_gaps():
    rows = [{"started_s": 0.0, "tokens_by_second": [4, 6]},
            {"started_s": 2.5, "tokens_by_second": [10]}]
    seconds, rate = traffic_plot.throughput_line(rows)
    assert seconds == [0.0, 1.0, 2.5]
    assert rate == pytest.approx([4.0, 5.0, 20 / 3])  # the 5-second mean


def test_the_plot_is_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    plans = [[{"batch_size": 1, "max_num_draft_tokens": 3}] * 4,
             [{"batch_size": 8, "max_num_draft_tokens": 0}] * 6]
    rows = [{"phase": "quiet", "started_s": 0.0, "tokens_by_second": [5, 6]},
            {"phase": "busy", "started_s": 2.0, "tokens_by_second": [30, 32, 31]}]
    traffic_plot.plot_traffic("cost", plans, {"no_spec": rows, "cost": rows},
                              tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0
