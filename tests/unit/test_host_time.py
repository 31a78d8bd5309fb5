"""The arithmetic of ``benchmarks/host_time.py``: a step's split into host
time and ops, the medians, and the exclusive clock that feeds them."""

from __future__ import annotations

import pytest

from benchmarks.host_time import (LAUNCH_ESTIMATE_US, in_engine_calibration, percentile,
                                  plugin_seconds, split_step, summarize)
from gammatune_tools.bench.host_clock import (FORWARD, META, OP, PLUGIN, VIEW, VLLM, Clock,
                                              call_kind)

NO_CATCHING = {"outside": 0.0, "inside": 0.0}


def test_percentile_interpolates_between_the_sorted_values():
    assert percentile([4, 1, 3, 2], 0.5) == pytest.approx(2.5)
    assert percentile([4, 1, 3, 2], 0.9) == pytest.approx(3.7)
    assert percentile([7.0], 0.9) == 7.0
    assert percentile([], 0.5) is None


def test_host_time_is_the_plugins_own_time_plus_its_views_and_metadata_reads():
    seconds = {PLUGIN: 1e-3, OP: 4e-4, VIEW: 1e-4, META: 5e-5, FORWARD: 5e-3, VLLM: 2e-3}
    counts = {OP: 10, VIEW: 4, META: 6, "passes": 3}
    row = split_step(seconds, counts, NO_CATCHING)
    assert row["host_ms"] == pytest.approx(1.0 + 0.1 + 0.05)
    assert row["op_cpu_ms"] == pytest.approx(0.4)
    assert (row["ops"], row["views"], row["metadata_reads"]) == (10, 4, 6)
    assert row["launch_estimate_ms"] == pytest.approx(10 * LAUNCH_ESTIMATE_US / 1e3)
    assert (row["forward_ms"], row["vllm_ms"]) == (pytest.approx(5.0), pytest.approx(2.0))
    assert row["entry_ms"] == pytest.approx(1.0 + 0.4 + 0.1 + 0.05 + 5.0 + 2.0)
    assert row["draft_passes"] == 3


def test_the_catching_overhead_is_taken_out_of_host_time_and_of_each_call():
    seconds = {PLUGIN: 1e-3, OP: 4e-4, VIEW: 1e-4, META: 5e-5}
    counts = {OP: 10, VIEW: 4, META: 6}
    row = split_step(seconds, counts, {"outside": 1e-6, "inside": 2e-6})
    # outside: 20 caught calls x 1 us off the plugin's own time; inside: 2 us
    # off each call's interval (views and metadata reads stay host time)
    assert row["host_ms"] == pytest.approx((1e-3 - 20e-6 + 1e-4 - 8e-6 + 5e-5 - 12e-6) * 1e3)
    assert row["op_cpu_ms"] == pytest.approx((4e-4 - 20e-6) * 1e3)


def test_the_split_never_goes_negative():
    row = split_step({PLUGIN: 1e-6, OP: 1e-6}, {OP: 5}, {"outside": 1e-5, "inside": 1e-5})
    assert row["host_ms"] == 0.0 and row["op_cpu_ms"] == 0.0


def test_summary_separates_steps_that_ran_the_draft_model():
    rows = [split_step({PLUGIN: ms / 1e3}, {"passes": passes}, NO_CATCHING)
            for ms, passes in ((1.0, 8), (3.0, 8), (2.0, 0), (5.0, 4))]
    rows = [{**row, "step_ms": 10.0} for row in rows]
    summary = summarize(rows)
    assert (summary["steps"], summary["drafting_steps"]) == (4, 3)
    assert summary["host_ms"]["median"] == pytest.approx(2.5)
    assert summary["host_ms_drafting_steps"]["median"] == pytest.approx(3.0)
    assert summary["host_ms_other_steps"]["median"] == pytest.approx(2.0)
    assert summarize(rows[:1])["host_ms_other_steps"]["median"] is None


def test_plugin_seconds_are_its_code_and_its_torch_calls():
    seconds = {PLUGIN: 1.0, OP: 0.5, VIEW: 0.25, META: 0.125, FORWARD: 8.0, VLLM: 16.0}
    assert plugin_seconds(seconds) == 1.875


def test_the_engines_catching_cost_per_call_replaces_the_loops():
    loop = {"outside": 2e-6, "inside": 1e-6}
    # caught: 1.45 ms of plugin time, 40 calls; uncaught: 1.0 ms -> 11.25 us a call
    caught = [({PLUGIN: 1.0e-3, OP: 0.4e-3, META: 0.05e-3}, {OP: 30, META: 10})] * 3
    plain = [({PLUGIN: 1.0e-3}, {})] * 3
    calibration = in_engine_calibration(caught, plain, loop)
    assert calibration["per_call"] == pytest.approx(11.25e-6)
    assert calibration["outside"] == pytest.approx(10.25e-6)
    assert calibration["inside"] == loop["inside"]
    # the split of a caught step then gives back the uncaught plugin time
    row = split_step(*caught[0], calibration)
    assert row["host_ms"] + row["op_cpu_ms"] == pytest.approx(1.0)


def test_without_a_comparison_the_loops_calibration_stays():
    loop = {"outside": 2e-6, "inside": 1e-6}
    assert in_engine_calibration([({PLUGIN: 1e-3}, {})], [({PLUGIN: 1e-3}, {})], loop) == {
        **loop, "per_call": None}
    assert in_engine_calibration([({PLUGIN: 1e-3}, {OP: 3})], [], loop)["per_call"] is None


def test_clock_gives_each_instant_to_the_innermost_category():
    ticks = iter([0.0, 1.0, 3.0, 4.0, 10.0])
    clock = Clock(now=lambda: next(ticks))
    clock.push(PLUGIN)   # 0
    clock.push(VLLM)     # 1: plugin ran 1
    clock.push(PLUGIN)   # 3: vllm ran 2
    clock.pop()          # 4: plugin ran 1
    clock.pop()          # 10: vllm ran 6
    seconds, _ = clock.take()
    assert seconds == {PLUGIN: 2.0, VLLM: 8.0}
    assert clock.take() == ({}, {})


def test_call_kind_tells_kernels_from_views_and_metadata():
    torch = pytest.importorskip("torch")
    x = torch.zeros(4, 4)
    assert call_kind(torch.Tensor.shape.__get__, (x,)) == META
    assert call_kind(torch.Tensor.size, (x,)) == META
    assert call_kind(torch.Tensor.unsqueeze, (x, 0)) == VIEW
    assert call_kind(torch.Tensor.__getitem__, (x, (slice(None), 1))) == VIEW
    assert call_kind(torch.Tensor.__getitem__, (x, x[0] > 0)) == OP
    assert call_kind(torch.cat, ([x, x],)) == OP
