"""The benchmark report's arithmetic (no engine)."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "diagnostics"))

import aba  # noqa: E402
import gsm8k_quality  # noqa: E402
import paired  # noqa: E402
import report  # noqa: E402


def test_final_number_and_wilson():
    assert gsm8k_quality.final_number("so 3 + 4 = 7, the answer is $1,234.") == 1234.0
    assert gsm8k_quality.final_number("no digits") is None
    low, high = gsm8k_quality.wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-3) and high == pytest.approx(0.9433, abs=1e-3)
    assert gsm8k_quality.wilson_interval(0, 0) == (0.0, 1.0)


def test_final_number_prefers_the_last_boxed_answer():
    text = "She makes \\boxed{18} dollars per day (for 7 days: 126)."
    assert gsm8k_quality.final_number(text) == 18.0
    assert gsm8k_quality.final_number("\\boxed{x} then 5") == 5.0  # no number inside


def test_paired_difference_counts_discordant_problems():
    method = [True, True, False, True, False, True, True, True]
    target = [True, False, False, True, True, False, False, True]
    pd = gsm8k_quality.paired_difference(method, target)
    assert (pd["only_method"], pd["only_reference"]) == (3, 1)
    assert pd["difference"] == pytest.approx(2 / 8)
    half = 1.96 * math.sqrt(4 - 4 / 8) / 8
    assert (pd["low"], pd["high"]) == pytest.approx((2 / 8 - half, 2 / 8 + half))
    # McNemar exact: 2 * P(Bin(4, 1/2) <= 1) = 2 * 5/16
    assert pd["p"] == pytest.approx(10 / 16)
    same = gsm8k_quality.paired_difference(target, target)
    assert (same["difference"], same["low"], same["high"], same["p"]) == (0.0, 0.0, 0.0, 1.0)


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


# -- shared helpers, serving, traces, multi-turn ------------------------------

import json  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import bench_common  # noqa: E402
import run_bench  # noqa: E402
import serve_bench  # noqa: E402

from vllm_gammatune.telemetry import trace  # noqa: E402
from gammatune_tools.evaluation import measure  # noqa: E402


def test_parse_ks_names_and_lists():
    assert bench_common.parse_ks("paper") == [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24]
    assert bench_common.parse_ks("quick") == [2, 4, 8]
    assert bench_common.parse_ks("3, 5") == [3, 5]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_load_prompts_turns_split_and_per_category(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [
        {"question_id": 1, "category": "a", "turns": ["a1", "a1-second"]},
        {"question_id": 2, "category": "a", "turns": ["a2", "a2-second"]},
        {"question_id": 3, "category": "b", "turns": ["b3"]},
        {"question_id": 4, "category": "a", "turns": ["a4", "a4-second"]},
    ])
    assert bench_common.load_prompts("specbench", 1, spec_bench_path=path) == [
        ("a", ["a1"]), ("b", ["b3"])]
    assert bench_common.load_prompts("specbench", None, "eval", turns=2,
                                     spec_bench_path=path) == [
        ("a", ["a2", "a2-second"]), ("a", ["a4", "a4-second"])]
    assert bench_common.load_prompts("specbench", 5, "tune", turns=2,
                                     spec_bench_path=path) == [
        ("a", ["a1", "a1-second"]), ("b", ["b3"])]
    plain = write_jsonl(tmp_path / "mine.jsonl", [{"prompt": "p"}, {"question": "q"}])
    assert bench_common.load_prompts(str(plain)) == [("mine", ["p"]), ("mine", ["q"])]


def test_load_prompts_without_categories_ignores_per_category(tmp_path):
    # GSM8K has no category: --per-category must not cap it at 2 problems
    plain = write_jsonl(tmp_path / "math.jsonl", [{"question": str(i)} for i in range(5)])
    assert [t for _, (t,) in bench_common.load_prompts(str(plain), 2)] == ["0", "1", "2", "3", "4"]
    assert len(bench_common.load_prompts(str(plain), 2, limit=3)) == 3


def test_parse_spec_options_substitutes_draft_and_refuses_bad_input():
    specs = bench_common.parse_spec_options(
        ['cost={"method": "gammatune_cost", "model": "{draft}", "num_speculative_tokens": 16}'],
        "/models/draft")
    assert specs == {"cost": {"method": "gammatune_cost", "model": "/models/draft",
                              "num_speculative_tokens": 16}}
    with pytest.raises(ValueError, match="NAME=JSON"):
        bench_common.parse_spec_options(['{"method": "x"}'], "d")
    with pytest.raises(ValueError, match="'method'"):
        bench_common.parse_spec_options(['x={"model": "d"}'], "d")


def test_cell_keys_and_resume_skip_truncated_lines(tmp_path):
    assert bench_common.cell_key("gammatune", 4, 1, 0.0) == "gammatune|k=4|b=1|t=0.0"
    assert bench_common.cell_key("gammatune", 4, 16, 0.7, size_name="c", turns=2) == \
        "gammatune|k=4|c=16|t=0.7|turns=2"
    path = tmp_path / "cells.jsonl"
    path.write_text('{"key": "a"}\n{"key": "b"}\n{"key": "c", "tok')
    assert bench_common.done_keys(path) == {"a", "b"}


def test_per_category_sums_homogeneous_batches_and_pools_mixed_ones():
    batches = [
        {"indices": [0, 1], "turn": 1, "wall_seconds": 2.0, "output_tokens": 20,
         "drafts": 4, "draft_tokens": 8, "accepted": 6},
        {"indices": [0], "turn": 2, "wall_seconds": 1.0, "output_tokens": 10,
         "drafts": 2, "draft_tokens": 4, "accepted": 1},
        {"indices": [2, 3], "turn": 1, "wall_seconds": 3.0, "output_tokens": 30,
         "drafts": 1, "draft_tokens": 2, "accepted": 2},
    ]
    sums = run_bench.per_category(batches, ["code", "code", "code", "math"])
    assert sums["code"]["wall_seconds"] == 3.0 and sums["code"]["output_tokens"] == 30
    assert sums["code"]["accepted"] == 7 and sums["code"]["requests"] == 3
    assert sums["mixed"]["output_tokens"] == 30 and "math" not in sums


class FakeLLM:
    """Answers every conversation with its length; counts one draft per call."""

    def __init__(self):
        self.calls, self.drafts = [], 0

    def chat(self, conversations, params, use_tqdm=False):
        self.calls.append(conversations)
        self.drafts += 1
        return [SimpleNamespace(outputs=[SimpleNamespace(
            text=f"answer{len(conv)}", token_ids=[1] * len(conv))]) for conv in conversations]

    def get_metrics(self):
        return [SimpleNamespace(name="vllm:spec_decode_num_drafts", value=self.drafts)]


def test_measure_sends_second_turn_after_the_models_answer():
    llm = FakeLLM()
    prompts = [[{"role": "user", "content": f"q{i}"}] for i in range(3)]
    seen = []
    result = measure(llm, "m", 2, prompts, None, batch_size=2, on_outputs=seen.append,
                     follow_ups=[["q0-second"], [], ["q2-second"]])
    # warm-up, batch [0, 1] turn 1, [0] turn 2, [2] turn 1, [2] turn 2
    assert [len(c) for c in llm.calls] == [1, 2, 1, 1, 1]
    assert llm.calls[2][0] == [{"role": "user", "content": "q0"},
                               {"role": "assistant", "content": "answer1"},
                               {"role": "user", "content": "q0-second"}]
    assert [(b["indices"], b["turn"]) for b in result.batches] == [
        ([0, 1], 1), ([0], 2), ([2], 1), ([2], 2)]
    assert result.num_requests == 5 and len(seen) == 4
    assert result.output_tokens == 1 + 1 + 3 + 1 + 3
    assert result.drafts == 4 and [b["drafts"] for b in result.batches] == [1, 1, 1, 1]


METRICS_PAGE = """# HELP vllm:spec_decode_num_drafts_total drafts
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 9.0
vllm:gammatune_plugin_time_us_total{engine="0",model_name="m"} 1200.0
vllm:gammatune_steps_total{engine="0",model_name="m"} 12.0
vllm:gammatune_draft_length_bucket{le="1.0"} 3.0
"""


def test_parse_metrics_sums_labels_and_derives_counts():
    values = serve_bench.parse_metrics(METRICS_PAGE)
    assert values == {"drafts": 15.0, "draft_tokens": 40.0, "accepted": 30.0,
                      "gammatune_plugin_time_us": 1200.0, "gammatune_steps": 12.0}
    before = {"drafts": 5.0, "draft_tokens": 10.0, "accepted": 10.0,
              "gammatune_plugin_time_us": 200.0}
    delta = serve_bench.metrics_delta(before, values)
    counts = serve_bench.derived(delta, output_tokens=40)
    assert counts["mean_accepted_length"] == pytest.approx(3.0)  # 1 + 20 / 10
    assert counts["acceptance_rate"] == pytest.approx(20 / 30)
    assert counts["target_passes_per_token"] == pytest.approx(0.5)
    assert counts["plugin_time_us_per_token"] == pytest.approx(25.0)
    assert counts["plugin_us_per_step"] == pytest.approx(1000 / 12)  # 12 steps, none before
    assert serve_bench.derived({}, 0)["mean_accepted_length"] is None


def test_sharegpt_rows_render_first_turn_and_plan_skips_done_cells():
    rows = serve_bench.sharegpt_rows([("code", ["hi", "again"])], lambda t: f"<{t}>")
    assert rows[0]["conversations"][0] == {"from": "human", "value": "<hi>"}
    custom = {"cost": {"method": "gammatune_cost", "model": "d"}}
    done = {bench_common.cell_key("no_spec", 0, 1, 0.0, size_name="c")}
    plan = bench_common.plan_cells(["no_spec", "gammatune", "cost"], [2, 4], [1, 4], [0.0],
                                   custom, done, size_name="c")
    assert [(m, k, todo) for m, k, todo, _ in plan] == [
        ("no_spec", 0, [(4, 0.0)]), ("gammatune", 2, [(1, 0.0), (4, 0.0)]),
        ("gammatune", 4, [(1, 0.0), (4, 0.0)]), ("cost", 0, [(1, 0.0), (4, 0.0)])]
    assert plan[3][3] == custom["cost"] and plan[1][3] == {}
    variant = bench_common.plan_cells(["gammatune"], [2], [1], [0.0], {}, set(),
                                      variant_of=lambda m: {"eta": 0.3})
    assert variant[0][3] == {"eta": 0.3}
    with pytest.raises(ValueError, match="unknown 'nope'"):
        bench_common.plan_cells(["nope"], [2], [1], [0.0], {}, set())


def test_trace_writer_numbers_steps_per_request(tmp_path, monkeypatch):
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv(trace.ENV_VAR, str(path))
    trace._reset_for_tests()
    try:
        trace.record("a", 4, 2)
        trace.record("b", 4, 4)
        trace.record("a", 3, 1)
        trace.writer().flush()
    finally:
        trace._reset_for_tests()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [
        {"req_id": "a", "step": 1, "num_draft_tokens": 4, "num_accepted_tokens": 2},
        {"req_id": "b", "step": 1, "num_draft_tokens": 4, "num_accepted_tokens": 4},
        {"req_id": "a", "step": 2, "num_draft_tokens": 3, "num_accepted_tokens": 1}]
    steps = report.load_trace(path)
    assert [s["step"] for s in steps["a"]] == [1, 2]
    assert report.longest_trace([path])[1] == "a"


def test_trace_keeps_engine_steps_apart_from_requests(tmp_path, monkeypatch):
    from vllm_gammatune.policies import StepDecision

    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv(trace.ENV_VAR, str(path))
    trace._reset_for_tests()
    decision = StepDecision(
        batch_size=2, num_scheduled_tokens=2, has_prefill=False, kind="draft", num_draft_tokens=5, max_num_draft_tokens=3,
        num_probes=0, catch_up_tokens=40, catch_up_seconds_per_token=0.002,
        drafting_share=0.5, predicted_tokens=4.5, predicted_seconds=0.2,
        drafting_scale=1.0, informed=False, measured_tokens=None, measured_seconds=None,
        previous_cycle_seconds=0.3, step_costs=(0.1, 0.0, 0.04, 0.0))
    try:
        trace.record("a", 4, 2)
        trace.record_step(decision)
        trace.writer().flush()
    finally:
        trace._reset_for_tests()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[1]["event"] == "plan"
    assert lines[1]["catch_up_tokens"] == 40 and lines[1]["kind"] == "draft"
    assert lines[1]["step_costs"] == [0.1, 0.0, 0.04, 0.0]
    assert list(report.load_trace(path)) == ["a"]  # the plan line is no request


def test_trace_is_off_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(trace.ENV_VAR, raising=False)
    trace._reset_for_tests()
    trace.record("a", 4, 2)
    assert trace.writer() is None
    trace._reset_for_tests()


def sized(method, k, tps, batch, categories=None):
    row = cell(method, k, tps, forwards=1.0)
    row["batch_size"] = batch
    if categories:
        row["per_category"] = {c: {"output_tokens": t, "wall_seconds": 1.0, "drafts": 2,
                                   "accepted": 2} for c, t in categories.items()}
    return row


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


def test_projection_unknown_for_uncounted_drafters():
    schedule = cell("vllm_schedule", 3, 8.0, passes=0.4)
    assert report.draft_forwards_per_token(schedule) is None
    assert report.projected_speedup(schedule, 10) is None


def test_aba_compares_each_run_with_the_baseline_runs_around_it(tmp_path):
    import json

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


def test_aba_ratio_interval():
    mean, low, high = report.ratio_interval([1.0, 1.1, 0.9, 1.0])
    # sd 0.0816, t(0.975, 3) = 3.182: half 0.130
    assert mean == 1.0 and abs(low - 0.870) < 1e-3 and abs(high - 1.130) < 1e-3
    assert report.ratio_interval([1.2]) == (1.2, None, None)


def test_paired_engine_order_rotates_so_each_engine_goes_first_equally():
    methods = ["no_spec", "cost"]
    firsts = [paired.engine_order(methods, r, b)[0] for r in range(2) for b in range(3)]
    assert firsts == ["no_spec", "cost", "no_spec", "cost", "no_spec", "cost"]
    assert paired.method_name("no_spec#2") == "no_spec" == paired.method_name("no_spec")
    three = ["a", "b", "c"]
    assert [paired.engine_order(three, 0, b) for b in range(3)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]


def paired_row(size, round_index, batch, method, seconds, tokens=8, accepted=0.0,
               token_ids=None, **counts):
    return {"batch_size": size, "round": round_index, "batch": batch, "method": method,
            "wall_seconds": seconds, "output_tokens": tokens, "accepted": accepted,
            "token_ids": token_ids, **counts}


def test_paired_summary_uses_complete_rounds_and_pairs_each_round():
    # 3 prompts at batch 2: two batches per round
    rows = []
    for r, (base, method) in enumerate([(1.0, 0.8), (2.0, 2.0)]):  # ratio 1.25, then 1.0
        for b in range(2):
            rows.append(paired_row(2, r, b, "no_spec", base, token_ids=[[1, 2], [3, 4]]))
            rows.append(paired_row(2, r, b, "cost", method, accepted=2.0,
                                   token_ids=[[1, 2], [3, 5]], draft_forward_passes=1.0,
                                   plugin_steps=4.0, skipped_draft_steps=3.0))
    rows.append(paired_row(2, 2, 0, "no_spec", 9.0))  # round 2 cut short: ignored
    assert paired.complete_rounds(rows, ["no_spec", "cost"], 3) == {2: {0, 1}}
    summary = paired.summarize(rows, ["no_spec", "cost"], 3)
    base, cost = summary
    assert base["rounds"] == 2 and base["ratio"] is None
    assert base["tokens_per_second"] == [8.0, 4.0]
    assert cost["ratios"] == pytest.approx([1.25, 1.0])
    assert cost["ratio"][0] == pytest.approx(1.125)
    # 4 batches x 8 tokens, 8 accepted: (32 - 8) / 32 target passes per token
    assert cost["target_passes_per_token"] == pytest.approx(0.75)
    assert cost["draft_forwards_per_token"] == pytest.approx(4 / 32)
    assert cost["drafted_step_share"] == pytest.approx(0.25)
    assert cost["same_as_baseline"] == (4, 8)  # one request of two differs per batch
    text = paired.report(summary, "no_spec", "t")
    assert "| 2 | cost | 2 | 10.00, 4.00 | 1.250, 1.000 |" in text and "| 4/8 |" in text


def test_served_interleaved_rows_summarised_per_round(tmp_path):
    import json

    def row(method, round_index, position, duration, tokens=1000, accepted=0.0):
        return {"method": method, "round": round_index, "position": position,
                "concurrency": 4, "duration": duration, "total_output_tokens": tokens,
                "metrics_delta": {"accepted": accepted, "gammatune_steps": 10.0,
                                  "gammatune_skipped_draft_steps": 9.0}}

    rows = [row("no_spec", 0, 0, 50.0), row("cost", 0, 1, 40.0, accepted=100.0),
            row("no_spec", 1, 1, 50.0), row("cost", 1, 0, 50.0),
            row("no_spec", 2, 0, 10.0)]  # round 2 lacks "cost": left out
    (tmp_path / "serve_cells.jsonl").write_text(
        "\n".join(json.dumps(r) for r in rows) + "\n{\"key\": \"not interleaved\"}\n")
    text = serve_bench.write_served_summary(tmp_path, ["no_spec", "cost"]).read_text()
    line = next(li for li in text.splitlines() if "| cost |" in li)
    # round 0: 25 / 20 tok/s = 1.25; round 1: 1.0; 100 of 2000 tokens accepted
    assert line.startswith("| 4 | cost | 2 | 25.00, 20.00 | 1.250, 1.000 | 1.125 [")
    assert "| 0.95 |" in line and "| 10% |" in line
    # cost ran second in round 0 (1.25) and first in round 1 (1.0)
    assert line.endswith("| 1.000 / 1.250 |")
    assert "| concurrency |" in text
    # started cost first, compared with no_spec all the same
    text = serve_bench.write_served_summary(tmp_path, ["cost", "no_spec"], "no_spec").read_text()
    assert "started in the order cost, no_spec" in text
    assert next(li for li in text.splitlines() if "| cost |" in li) == line
    assert "Every engine alive at once" in text
    # a --fresh-servers run says so instead (its context.json has the arguments)
    (tmp_path / "context.json").write_text(json.dumps(
        {"args": {"fresh_servers": True, "warmup_cell": True}}))
    text = serve_bench.write_served_summary(tmp_path, ["no_spec", "cost"]).read_text()
    assert "One server alive at a time" in text and "(`--warmup-cell`)" in text
    assert "alive at once" not in text and "started in the order" not in text
    assert next(li for li in text.splitlines() if "| cost |" in li) == line
    known = ["cost", "no_spec"]
    paired.check_engines(["no_spec", "no_spec#2", "cost"], [8], "no_spec", known)
    with pytest.raises(ValueError, match="--baseline 'other'"):
        paired.check_engines(["cost", "no_spec"], [8], "other", known)
    with pytest.raises(ValueError, match="--k: one length"):
        paired.check_engines(["cost", "no_spec"], [2, 4], None, known)
    with pytest.raises(ValueError, match="NAME#2"):
        paired.check_engines(["no_spec", "no_spec"], [8], None, known)
    with pytest.raises(ValueError, match="unknown 'nope#2'; allowed: cost, no_spec"):
        paired.check_engines(["no_spec", "nope#2"], [8], None, known)


def test_paired_pool_joins_rounds_of_both_start_orders_and_drops_first_rounds():
    def summary(*ratios):
        return [{"batch_size": 4, "method": "no_spec", "ratios": [1.0] * len(ratios)},
                {"batch_size": 4, "method": "cost", "ratios": list(ratios),
                 "batch_ratios": [r + d for r in ratios for d in (-0.05, 0.05)]}]

    pooled = paired.pool([("fwd", "no_spec", summary(0.8, 1.0, 1.1)),
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
    text = paired.pool_report(pooled)
    assert "| 4 | cost | fwd (3, 0.967); rev (3, 0.967) | 6 | 0.967 [" in text
    with pytest.raises(ValueError, match="different baselines \\(gammatune, no_spec\\)"):
        paired.pool([("a", "no_spec", summary(1.0)), ("b", "gammatune", summary(1.0))])


def run_folder(directory, methods, baseline, rows, file_name):
    """A run's folder as the harness leaves it: its arguments and its rows."""
    directory.mkdir()
    (directory / "context.json").write_text(json.dumps(
        {"args": {"methods": methods, "baseline": baseline}}))
    (directory / file_name).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return directory


def test_paired_pool_reads_served_runs_of_both_start_orders(tmp_path):
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
    assert [paired.read_run(d)[:2] for d in (a, b)] == [("a", "no_spec"), ("b", "no_spec")]
    (row,), served = paired.pool_directories([a, b])
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
        paired.pool_directories([a, offline])


def test_fresh_servers_keeps_one_server_alive_and_resumes(tmp_path, monkeypatch):
    """``serve_bench --fresh-servers``: one server at a time, the first rotating by
    round, a warm-up client run before each measured cell, done cells skipped."""
    import argparse

    events, alive = [], set()

    class FakeServer:
        def __init__(self, slug):
            self.slug = slug

        def stop(self):
            alive.discard(self.slug)
            events.append(("stop", self.slug))

    def fake_start(args, target, spec, env, out, slug):
        assert not alive, f"{slug} started while {alive} still up"
        alive.add(slug)
        events.append(("start", slug))
        return FakeServer(slug)

    run_args = argparse.Namespace(k="8", rounds=2, warmup_cell=True, baseline=None)

    class FakeCell(serve_bench.Cell):  # the real run_round; no client, no server
        target, env, results, args = "t", {}, tmp_path / "serve_cells.jsonl", run_args

        def __init__(self):
            pass

        def warm(self, server, concurrency, temperature, name):
            events.append(("warm", server.slug, concurrency))

        def run(self, server, key, method, k, concurrency, temperature, spec, variant, name,
                **extra):
            events.append(("run", server.slug, concurrency))
            serve_bench.append_row(self.results, {"key": key, **extra})

    monkeypatch.setattr(serve_bench, "start_server", fake_start)
    monkeypatch.setattr(serve_bench, "write_served_summary",
                        lambda *a: tmp_path / "serve_paired.md")
    # round 0 of no_spec at concurrency 4 already measured (a resumed run)
    FakeCell.results.write_text(json.dumps(
        {"key": "no_spec|k=8|c=4|t=0.0|round=0"}) + "\n")
    serve_bench.run_fresh_servers(run_args, ["no_spec", "cost"], lambda m, k: None, [4, 16],
                                  [0.0], FakeCell(), tmp_path)
    assert events == [
        ("start", "no_spec_r0"), ("warm", "no_spec_r0", 16), ("run", "no_spec_r0", 16),
        ("stop", "no_spec_r0"),
        ("start", "cost_r0"), ("warm", "cost_r0", 4), ("run", "cost_r0", 4),
        ("warm", "cost_r0", 16), ("run", "cost_r0", 16), ("stop", "cost_r0"),
        ("start", "cost_r1"), ("warm", "cost_r1", 4), ("run", "cost_r1", 4),
        ("warm", "cost_r1", 16), ("run", "cost_r1", 16), ("stop", "cost_r1"),
        ("start", "no_spec_r1"), ("warm", "no_spec_r1", 4), ("run", "no_spec_r1", 4),
        ("warm", "no_spec_r1", 16), ("run", "no_spec_r1", 16), ("stop", "no_spec_r1"),
    ]
    rows = [json.loads(line) for line in FakeCell.results.read_text().splitlines()]
    assert [(r.get("round"), r.get("position")) for r in rows[1:]] == [
        (0, 0), (0, 1), (0, 1), (1, 0), (1, 0), (1, 1), (1, 1)]
    events.clear()  # everything done: nothing starts again
    serve_bench.run_fresh_servers(run_args, ["no_spec", "cost"], lambda m, k: None, [4, 16],
                                  [0.0], FakeCell(), tmp_path)
    assert events == []


def test_oracle_picks_the_best_static_choice_overall_and_per_prompt(tmp_path):
    import oracle

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
