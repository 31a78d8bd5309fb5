"""benchmarks.oracle: a method against the best static choice and the per-prompt oracle."""

import math

import pytest
from bench_fixtures import run_folder

from benchmarks import oracle


def test_oracle_picks_the_best_static_choice_overall_and_per_prompt(tmp_path):
    def chained_run(name, engines, baseline, seconds_per_prompt):
        """seconds_per_prompt: per prompt, (method seconds, choice seconds) at batch 1."""
        choice = baseline or engines.split(",")[0]
        rows = [{"batch_size": 1, "round": 0, "batch": b, "method": method,
                 "wall_seconds": seconds, "output_tokens": 100}
                for b, pair in enumerate(seconds_per_prompt)
                for method, seconds in zip(("cost", choice), pair)]
        return run_folder(tmp_path / name, engines, baseline, rows, "paired.jsonl")

    # against K=2 (two start orders): 1.1 and 0.9 on prompt 0 (geometric mean
    # 0.995), 1.2 on prompt 1; against K=4: 1.3 on prompt 0, 0.8 on prompt 1
    k2 = chained_run("k2", "vllm@2,cost", None, [(10, 11), (10, 12)])
    k2_rev = chained_run("k2_rev", "cost,vllm@2", "vllm@2", [(10, 9), (10, 12)])
    k4 = chained_run("k4", "cost,vllm@4", "vllm@4", [(10, 13), (10, 8)])
    method, by_choice = oracle.read_chain([k2, k2_rev, k4])
    assert method == "cost"
    assert [len(runs) for runs in by_choice.values()] == [2, 1]
    assert oracle.joined(by_choice)["vllm@2"][(1, 0)] == pytest.approx(math.sqrt(1.1 * 0.9))
    (row,) = oracle.oracle(by_choice)
    # overall, K=4 (mean 1.05) is a harder yardstick than K=2 (mean 1.097)
    assert row["best_static"] == "vllm@4"
    assert row["against"]["vllm@4"][0] == pytest.approx(1.05)
    # per prompt the oracle takes K=2 on prompt 0 and K=4 on prompt 1
    assert [b["pick"] for b in row["per_batch"]] == ["vllm@2", "vllm@4"]
    assert row["oracle"][0] == pytest.approx((math.sqrt(0.99) + 0.8) / 2)
    assert row["oracle_picks"] == {"vllm@2": 1, "vllm@4": 1}
    # K=2's two runs differ on prompt 0 only (log 1.1 - log 0.9), one degree
    # of freedom per prompt: one run's noise is |log(1.1/0.9)| / 2
    sigma = abs(math.log(1.1 / 0.9)) / 2
    assert row["run_noise"] == pytest.approx(sigma)
    # the noise floor: below 1, the more so the noisier the runs
    assert row["noise_floor"] < 1.0
    assert oracle.noise_floor(2 * sigma, [2, 1]) < row["noise_floor"]
    assert oracle.noise_floor(1e-9, [2, 1]) == pytest.approx(1.0)
    text = oracle.oracle_report(method, [row])
    assert "| 1 | 2 | vllm@2 1.097 [" in text and "| vllm@4 | 1.050 [" in text
    assert f"| {sigma:.3f} | {row['noise_floor']:.3f} |" in text
    # no choice ran twice: no noise to tell
    (alone,) = oracle.oracle(oracle.read_chain([k2, k4])[1])
    assert alone["run_noise"] is None and alone["noise_floor"] is None
    # runs of different methods, or of more than two engines, are refused
    other = chained_run("other", "no_spec,gammatune", None, [(10, 10)])
    with pytest.raises(ValueError, match="different methods \\(cost, gammatune\\)"):
        oracle.read_chain([k2, other])
    three = chained_run("three", "no_spec,cost,vllm@2", None, [(10, 10)])
    with pytest.raises(ValueError, match="one method with one static choice"):
        oracle.read_chain([three])
    with pytest.raises(ValueError, match="--runs: .*nope is not a paired.py run"):
        oracle.read_chain([tmp_path / "nope"])
    # a relative run name not found as given is looked up beside --out
    assert oracle.run_folder("k4", tmp_path / "oracle") == k4
