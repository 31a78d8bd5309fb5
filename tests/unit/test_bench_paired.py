"""gammatune_tools.bench.paired: the order of interleaved runs and their summary."""

import json

import pytest
from bench_fixtures import paired_row

from gammatune_tools.bench import paired


def test_engine_order_rotates_so_each_engine_goes_first_equally():
    methods = ["no_spec", "cost"]
    firsts = [paired.engine_order(methods, r, b)[0] for r in range(2) for b in range(3)]
    assert firsts == ["no_spec", "cost", "no_spec", "cost", "no_spec", "cost"]
    three = ["a", "b", "c"]
    assert [paired.engine_order(three, 0, b) for b in range(3)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert paired.baseline_first(["cost", "no_spec"], "no_spec") == ["no_spec", "cost"]
    assert paired.baseline_first(["cost", "no_spec"], None) == ["cost", "no_spec"]


def test_check_engines_wants_known_methods_once_one_k_and_a_baseline_among_them():
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
    text = paired.paired_report(summary, "no_spec", "t")
    assert "| 2 | cost | 2 | 10.00, 4.00 | 1.250, 1.000 |" in text and "| 4/8 |" in text


def test_vllms_own_drafter_runs_k_forwards_in_every_step_that_emitted_tokens():
    rows = [paired_row(1, r, 0, engine, 1.0, tokens=10, accepted=9.0, target_passes=3,
                       engine_steps=3, drafts=2, draft_forward_passes=forwards)
            for r in range(2) for engine, forwards in
            (("vllm_draft_model@6", 0.0), ("vllm_draft_model", 0.0), ("cost", 7.0),
             ("vllm_ngram@4", 0.0))]
    summary = {row["method"]: row for row in paired.summarize(
        rows, ["vllm_draft_model@6", "vllm_draft_model", "cost", "vllm_ngram@4"], 1)}
    assert summary["vllm_draft_model@6"]["draft_forwards_per_token"] == pytest.approx(36 / 20)
    assert summary["vllm_draft_model"]["draft_forwards_per_token"] is None  # K not in the name
    assert summary["cost"]["draft_forwards_per_token"] == pytest.approx(14 / 20)
    assert summary["vllm_ngram@4"]["draft_forwards_per_token"] == 0.0  # no draft model
    # vLLM accepted 9 a request, 7 of them within its 10 tokens
    assert summary["cost"]["accepted_length"] == pytest.approx(1 + 14 / 4)
    assert summary["cost"]["target_passes_per_token"] == pytest.approx(0.3)


def test_served_interleaved_rows_summarised_per_round(tmp_path):
    def row(method, round_index, position, duration, tokens=1000, accepted=0.0):
        return {"method": method, "round": round_index, "position": position,
                "concurrency": 4, "duration": duration, "total_output_tokens": tokens,
                "metrics_delta": {"accepted": accepted, "target_passes": tokens - accepted,
                                  "gammatune_steps": 10.0,
                                  "gammatune_skipped_draft_steps": 9.0}}

    rows = [row("no_spec", 0, 0, 50.0), row("cost", 0, 1, 40.0, accepted=100.0),
            row("no_spec", 1, 1, 50.0), row("cost", 1, 0, 50.0),
            row("no_spec", 2, 0, 10.0)]  # round 2 lacks "cost": left out
    (tmp_path / "serve_cells.jsonl").write_text(
        "\n".join(json.dumps(r) for r in rows) + "\n{\"key\": \"not interleaved\"}\n")
    text = paired.write_served_summary(tmp_path, ["no_spec", "cost"]).read_text()
    line = next(li for li in text.splitlines() if "| cost |" in li)
    # round 0: 25 / 20 tok/s = 1.25; round 1: 1.0; 100 of 2000 tokens accepted
    assert line.startswith("| 4 | cost | 2 | 25.00, 20.00 | 1.250, 1.000 | 1.125 [")
    assert "| 0.95 |" in line and "| 10% |" in line
    # cost ran second in round 0 (1.25) and first in round 1 (1.0)
    assert line.endswith("| 1.000 / 1.250 |")
    assert "| concurrency |" in text
    # started cost first, compared with no_spec all the same
    text = paired.write_served_summary(tmp_path, ["cost", "no_spec"], "no_spec").read_text()
    assert "started in the order cost, no_spec" in text
    assert next(li for li in text.splitlines() if "| cost |" in li) == line
    assert "Every engine alive at once" in text
    # a --fresh-servers run says so instead (its context.json has the arguments)
    (tmp_path / "context.json").write_text(json.dumps(
        {"args": {"fresh_servers": True, "warmup_cell": True}}))
    text = paired.write_served_summary(tmp_path, ["no_spec", "cost"]).read_text()
    assert "One server alive at a time" in text and "(`--warmup-cell`)" in text
    assert "alive at once" not in text and "started in the order" not in text
    assert next(li for li in text.splitlines() if "| cost |" in li) == line


def test_an_engines_share_of_a_round_is_done_only_with_every_batch_of_every_size():
    rows = [{"round": 0, "method": "a", "batch_size": 1, "batch": b} for b in range(3)]
    rows += [{"round": 0, "method": "a", "batch_size": 2, "batch": b} for b in range(2)]
    rows += [{"round": 0, "method": "b", "batch_size": 1, "batch": b} for b in range(3)]
    rows += [{"round": 1, "method": "b", "batch_size": 2, "batch": b} for b in range(2)]
    assert paired.shares_done(rows, 0, [1, 2], num_prompts=3) == {"a"}
    assert paired.shares_done(rows, 0, [1], num_prompts=3) == {"a", "b"}
    assert paired.shares_done(rows, 1, [1, 2], num_prompts=3) == set()


def test_fresh_engines_start_each_engine_once_a_round_rotating_and_resume_by_share(
        tmp_path, monkeypatch):
    from types import SimpleNamespace

    from gammatune_tools.bench import paired_runs

    def fake_generate(llm, batch, params):
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[1] * params)])
                for _ in batch]

    class Counts:
        def __init__(self, llm):
            pass

        def read(self):
            return {"accepted": 0.0}

    monkeypatch.setattr(paired_runs, "generate", fake_generate)
    monkeypatch.setattr(paired_runs, "stop_llm", lambda llm: None)
    monkeypatch.setattr(paired_runs, "write_summaries", lambda *a: [])
    monkeypatch.setattr(paired_runs, "write_summary", lambda *a: None)
    started = []

    def start(method, trace_name):
        started.append(trace_name)
        return method

    main = paired_runs.PromptSet(tmp_path / "main", ["p1", "p2", "p3"], ["a", "b"], [1, 2], 4)
    also = paired_runs.PromptSet(tmp_path / "also", ["c1"], ["b", "c"], [1], 6)
    for prompt_set in (main, also):
        prompt_set.out.mkdir()
    args = SimpleNamespace(rounds=2)
    paired_runs.run_fresh_engines(args, [main, also], start, Counts)
    assert started == ["a_r0", "b_r0", "c_r0", "b_r1", "c_r1", "a_r1"]
    rows = paired.read_jsonl(main.out / paired.ROWS_FILE)
    assert len(rows) == 2 * 2 * (3 + 2)  # rounds x methods x (3 batches at 1, 2 at 2)
    assert {(r["round"], r["method"], r["position"]) for r in rows} == {
        (0, "a", 0), (0, "b", 1), (1, "b", 0), (1, "a", 2)}
    extra = paired.read_jsonl(also.out / paired.ROWS_FILE)
    assert [(r["method"], r["output_tokens"]) for r in extra] == [("b", 6), ("c", 6)] * 2
    # a rerun finds every share done and starts nothing
    started.clear()
    paired_runs.run_fresh_engines(args, [main, also], start, Counts)
    assert started == []
