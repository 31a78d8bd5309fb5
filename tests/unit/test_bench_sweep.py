"""gammatune_tools.bench.sweep: a paired run against its best fixed K and the
per-prompt oracle."""

import pytest
from bench_fixtures import paired_row

from gammatune_tools.bench import sweep
from gammatune_tools.bench.paired import ROWS_FILE
from gammatune_tools.bench.records import append_row

METHODS = ["vllm_draft_model@1", "vllm_draft_model@2", "cost"]
#: seconds for 8 tokens, per prompt: K=1 wins prompt 0, K=2 prompt 1
SECONDS = {"vllm_draft_model@1": (1.0, 2.0), "vllm_draft_model@2": (2.0, 1.0),
           "cost": (1.0, 1.0)}


def rows(rounds: int = 3) -> list[dict]:
    return [paired_row(1, r, prompt, method, seconds[prompt] * (1 + 0.01 * r),
                       accepted=4.0, drafts=2.0, engine_steps=4.0,
                       draft_forward_passes=5.0 if method == "cost" else 0.0)
            for r in range(rounds) for method, seconds in SECONDS.items()
            for prompt in range(2)]


def test_the_adaptive_method_against_the_best_fixed_k_and_the_oracle(tmp_path):
    for row in rows():
        append_row(tmp_path / ROWS_FILE, row)
    path = sweep.write_sweep(tmp_path, METHODS, 2)
    cell, = sweep.sweeps(rows(), METHODS, 2)
    versus = {(c["method"], c["against"]): c for c in cell["comparisons"]}
    # each fixed K makes 16 tokens in 3 s; the oracle and cost in 2 s
    assert versus[("cost", "best fixed K")]["ratio"] == pytest.approx(1.5)
    assert versus[("cost", "per-prompt oracle")]["ratio"] == pytest.approx(1.0)
    assert ("vllm_draft_model@1", "best fixed K") not in versus  # fixed choices are the baseline
    counts = cell["methods"]["vllm_draft_model@2"]
    assert counts["target_passes_per_token"] == pytest.approx(0.5)  # 4 passes for 8 tokens
    assert counts["draft_forwards_per_token"] == pytest.approx(2 * 4 / 8)  # K per step
    assert cell["methods"]["cost"]["draft_forwards_per_token"] == pytest.approx(5 / 8)
    text = path.read_text()
    assert "## Batch 1 (3 rounds, 2 units; best fixed: K=" in text
    assert "| cost | 7.92 | 1.500 [1.000, 1.500], at parity | 1.000 [" in text
    assert (tmp_path / "sweep.json").exists()


def test_no_sweep_without_both_fixed_and_adaptive_engines_or_a_complete_round(tmp_path):
    assert sweep.write_sweep(tmp_path, ["cost", "no_spec"], 2) is None
    assert sweep.write_sweep(tmp_path, METHODS[:2], 2) is None
    append_row(tmp_path / ROWS_FILE, rows(1)[0])  # one engine's first prompt only
    assert sweep.write_sweep(tmp_path, METHODS, 2) is None
    assert not (tmp_path / sweep.SWEEP_FILE).exists()
