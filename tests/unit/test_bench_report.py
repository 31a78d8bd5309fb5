"""gammatune_tools.bench.report: the report's arithmetic (no engine)."""

import pytest

from gammatune_tools.bench import report
from gammatune_tools.bench.tables import format_interval, label, pm


def cell(method, k, tps, passes=0.5, forwards=None):
    return {"method": method, "k": k, "batch_size": 1, "temperature": 0.0,
            "drafts": 10, "num_requests": 1, "output_tokens": 40,
            "tokens_per_second": tps, "mean_accepted_length": 2.0,
            "acceptance_rate": 0.5, "mean_draft_length": k, "target_passes_per_token": passes,
            "draft_forwards_per_token": forwards}


def sized(method, k, tps, batch, categories=None):
    row = cell(method, k, tps, forwards=1.0)
    row["batch_size"] = batch
    if categories:
        row["per_category"] = {c: {"output_tokens": t, "wall_seconds": 1.0, "drafts": 2,
                                   "accepted": 2} for c, t in categories.items()}
    return row


def test_projection_uses_eq6_and_each_rows_draft_forwards():
    # the row's exact counts (records.Measurement): c / (c * passes + forwards)
    fixed = cell("vllm_draft_model", 4, 8.0, passes=0.4, forwards=1.6)
    assert report.projected_speedup(fixed, 10) == pytest.approx(10 / 5.6)
    adaptive = cell("gammatune", 4, 9.0, passes=0.4, forwards=1.0)
    assert report.projected_speedup(adaptive, 10) == pytest.approx(10 / 5.0)
    assert report.projected_speedup(cell("no_spec", 0, 6.0, passes=1.0), 10) == 1.0


def test_projection_unknown_for_uncounted_drafters():
    schedule = cell("vllm_schedule", 3, 8.0, passes=0.4)  # its forwards are not counted
    assert report.projected_speedup(schedule, 10) is None
    assert report.projected_speedup(cell("gammatune", 4, 9.0, passes=None, forwards=1.0),
                                    10) is None


def test_report_summary_is_mean_and_std_over_initial_lengths():
    rows = [cell("no_spec", 0, 5.0, passes=1.0),
            cell("vllm_draft_model", 2, 8.0), cell("vllm_draft_model", 4, 10.0),
            cell("gammatune", 2, 10.0, forwards=1.0), cell("gammatune", 4, 11.0, forwards=1.0)]
    text = report.build_report(rows, {})
    assert "Best vLLM fixed K of the sweep: K=4" in text
    # speedups 10/8 = 1.25 and 11/10 = 1.10 -> mean 1.175, std 0.106
    assert "| gammatune | 1.175x | 0.106 | 2 |" in text


def test_summary_best_k_and_categories():
    rows = [sized("vllm_draft_model", 2, 8.0, 1, {"code": 8.0, "chat": 8.0}),
            sized("vllm_draft_model", 4, 10.0, 1, {"code": 12.0, "chat": 8.0}),
            sized("gammatune", 2, 10.0, 1, {"code": 12.0, "chat": 4.0}),
            sized("gammatune", 4, 12.0, 1, {"code": 12.0, "chat": 12.0})]
    text = report.build_report(rows, {})
    # vs same K: 10/8 and 12/10 -> 1.225 ± 0.035; vs best K (10): 1.0, 1.2 -> 1.100 ± 0.141
    assert "| gammatune | 1.225x | 0.035 | 2 | 1.100 ± 0.141 |" in text
    # code: 12/8 = 1.5 and 12/12 = 1.0 -> 1.25 ± 0.35; chat: 0.5 and 1.5 -> 1.00 ± 0.71
    assert "| gammatune | 1.00 ± 0.71 | 1.25 ± 0.35 |" in text


def test_throughput_by_batch_averages_over_k():
    rows = [sized("gammatune", 2, 10.0, 1), sized("gammatune", 4, 12.0, 1),
            sized("gammatune", 2, 30.0, 4)]
    series = report.throughput_by_batch(rows)[(0.0, 1)]["gammatune"]
    assert series[0][:2] == (1, 11.0) and series[1] == (4, 30.0, 0.0)


def test_throughput_by_batch_keeps_fixed_k_apart():
    rows = [sized("vllm_draft_model", 1, 6.0, 1), sized("vllm_draft_model", 3, 9.0, 1)]
    series = report.throughput_by_batch(rows)[(0.0, 1)]
    assert series["vllm_draft_model K=1"] == [(1, 6.0, 0.0)]
    assert series["vllm_draft_model K=3"] == [(1, 9.0, 0.0)]


def test_serving_table_speedup_against_no_spec_at_same_concurrency():
    rows = [{"method": "no_spec", "k": 0, "concurrency": 4, "temperature": 0.0,
             "output_throughput": 20.0, "num_requests": 8, "completed": 8},
            {"method": "gammatune", "k": 3, "concurrency": 4, "temperature": 0.0,
             "output_throughput": 25.0, "median_tpot_ms": 40.0, "num_requests": 8,
             "completed": 8, "metrics_delta": {}},
            {"method": "no_spec", "k": 0, "concurrency": 1, "temperature": 0.0,
             "output_throughput": 5.0, "num_requests": 8, "completed": 8}]
    text = "\n".join(report.serving_table(rows))
    assert "| gammatune | 3 | 4 | 0.0 | - | 25.00 | 1.25 | - / 40.0 |" in text


def test_tables_write_variants_intervals_and_spreads():
    assert label({"method": "gammatune", "variant": {"eta": 0.3, "delta": 1}}) == \
        "gammatune (delta=1, eta=0.3)"
    assert label({"method": "cost", "variant": {"method": "gammatune_cost"}}) == "cost"
    assert format_interval((1.0, 0.9, 1.1)) == "1.000 [0.900, 1.100]"
    assert format_interval((1.2, None, None)) == "1.200" and format_interval(None) == "-"
    assert pm([1.0, 3.0]) == "2.00 ± 1.41" and pm([]) == "-"
