"""benchmarks.idle_overhead: CPU seconds per token, paired by round."""

from __future__ import annotations

import os

import pytest

from benchmarks import idle_overhead


def rows_of(cpu: dict[str, list[float]], tokens: int = 256, skip: tuple = ()) -> list[dict]:
    return [{"batch_size": 4, "round": r, "batch": 0, "method": method, "output_tokens": tokens,
             "cpu_seconds": seconds, "wall_seconds": 1.0}
            for method, per_round in cpu.items() for r, seconds in enumerate(per_round)
            if (method, r) not in skip]


def test_cpu_summary_pairs_rounds_and_skips_incomplete_ones():
    rows = rows_of({"no_spec": [10.0, 12.0, 11.0, 9.0], "never": [10.0, 12.0, 11.0, 9.9]},
                   skip=(("never", 3),))  # round 3 cut short: not counted
    base, never = idle_overhead.cpu_summary(rows, ["no_spec", "never"], num_prompts=4)
    assert base["rounds"] == never["rounds"] == 3
    assert base["cpu_ms_per_token"] == pytest.approx([1000 * s / 256 for s in (10, 12, 11)])
    assert never["ratios"] == pytest.approx([1.0, 1.0, 1.0])
    mean, low, high = never["ratio"]
    assert mean == pytest.approx(1.0) and low == pytest.approx(1.0) and high == pytest.approx(1.0)
    assert base["ratio"] is None


def test_cpu_summary_ratio_is_baseline_over_method():
    rows = rows_of({"no_spec": [10.0, 10.0], "never": [11.0, 12.5]})
    _, never = idle_overhead.cpu_summary(rows, ["no_spec", "never"], num_prompts=4)
    assert never["ratios"] == pytest.approx([10 / 11, 10 / 12.5])  # below 1: more CPU


def test_cpu_seconds_counts_live_processes_only():
    own = idle_overhead.cpu_seconds({os.getpid()})
    assert own > 0
    assert idle_overhead.cpu_seconds({os.getpid(), 2 ** 22 + 1}) >= own  # no such pid: 0
