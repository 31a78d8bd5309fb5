"""The benchmark report's arithmetic (no engine)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import gsm8k_quality  # noqa: E402
import report  # noqa: E402


def test_final_number_and_wilson():
    assert gsm8k_quality.final_number("so 3 + 4 = 7, the answer is $1,234.") == 1234.0
    assert gsm8k_quality.final_number("no digits") is None
    low, high = gsm8k_quality.wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-3) and high == pytest.approx(0.9433, abs=1e-3)
    assert gsm8k_quality.wilson_interval(0, 0) == (0.0, 1.0)


def test_differing_share_counts_positions_and_length():
    ref = [[1, 2, 3, 4], [5, 6]]
    out = [[1, 2, 9, 4], [5, 6, 7]]
    assert gsm8k_quality.differing_share(ref, out) == pytest.approx(2 / 7)


def cell(method, k, tps, passes=0.5, forwards=None):
    return {"method": method, "k": k, "batch_size": 1, "temperature": 0.0,
            "drafts": 10, "num_requests": 1, "output_tokens": 40,
            "tokens_per_second": tps, "mean_accepted_length": 2.0,
            "acceptance_rate": 0.5, "mean_draft_length": k, "target_passes_per_token": passes,
            "draft_forward_passes_per_token": forwards}


def test_projection_uses_eq6_and_fixed_k_forwards():
    fixed = cell("vllm_draft_model", 4, 8.0, passes=0.4)
    fixed.update(drafts=38, num_requests=2, output_tokens=100)
    # K forwards per call, calls = drafts + requests: 4 * 40 / 100 = 1.6 per token;
    # c / (c * passes + 1.6) = 10 / (4 + 1.6)
    assert report.projected_speedup(fixed, 10) == pytest.approx(10 / 5.6)
    adaptive = cell("gammatune", 4, 9.0, passes=0.4, forwards=1.0)
    assert report.projected_speedup(adaptive, 10) == pytest.approx(10 / 5.0)
    assert report.projected_speedup(cell("no_spec", 0, 6.0, passes=1.0), 10) == 1.0


def test_report_summary_is_mean_and_std_over_initial_lengths():
    rows = [cell("no_spec", 0, 5.0, passes=1.0),
            cell("vllm_draft_model", 2, 8.0), cell("vllm_draft_model", 4, 10.0),
            cell("gammatune", 2, 10.0, forwards=1.0), cell("gammatune", 4, 11.0, forwards=1.0)]
    text = report.build_report(rows, {})
    assert "Best vLLM fixed K of the sweep: K=4" in text
    # speedups 10/8 = 1.25 and 11/10 = 1.10 -> mean 1.175, std 0.106
    assert "| gammatune | 1.175x | 0.106 | 2 |" in text
