"""gammatune_tools.bench.traffic: the trace of phases, what the client is told
per phase, the per-request details, and the phases run back to back against
one server (a stand-in server and client)."""

import argparse
import json
import math

import pytest

from gammatune_tools.bench import traffic
from gammatune_tools.bench.traffic import Phase


def test_phases_parse_with_their_arrivals_and_bad_entries_are_named():
    phases = traffic.parse_phases("quiet:1:6, busy:8:24:2:0.5,quiet_again:1:6")
    assert phases == [Phase("quiet", 1, 6), Phase("busy", 8, 24, 2.0, 0.5),
                      Phase("quiet_again", 1, 6)]
    assert phases[0].request_rate == math.inf and phases[0].burstiness == 1.0
    for text, message in (("quiet:1", "'quiet:1' is not NAME:CONCURRENCY"),
                          ("quiet:one:6", "'quiet:one:6': concurrency and requests"),
                          ("busy:0:6", "'busy:0:6': every number must be positive"),
                          ("busy:8:6:-1", "every number must be positive"),
                          ("a:1:1,a:2:2", "each phase needs its own name; got a, a")):
        with pytest.raises(ValueError, match=message):
            traffic.parse_phases(text)


def test_kinds_parse_to_their_categories():
    assert traffic.parse_kinds("code=coding, long=summarization+rag") == {
        "code": ["coding"], "long": ["summarization", "rag"]}
    for text, message in (("code", "'code' is not KIND=CATEGORY"), ("code=", "is not KIND"),
                          ("a=x,a=y", "kind 'a' given twice")):
        with pytest.raises(ValueError, match=message):
            traffic.parse_kinds(text)


def pool_of(**categories):
    """{category: [(text, tokens)]} with texts naming their place."""
    return {c: [(f"{c}{i}", tokens) for i, tokens in enumerate(lengths)]
            for c, lengths in categories.items()}


def test_every_phase_holds_the_same_mix_and_every_prompt_is_sent_once():
    pool = pool_of(coding=[10] * 4, math=[10] * 2, math_reasoning=[10] * 2,
                   rag=[900, 2000, 700, 800])
    kinds = {"code": ["coding"], "math": ["math", "math_reasoning"], "long": ["rag"]}
    phases = [Phase("quiet", 1, 2), Phase("busy", 8, 3), Phase("again", 1, 2)]
    trace = traffic.build_trace(phases, kinds, pool, max_prompt_tokens=1000)
    assert [[p.kind for p in phase] for phase in trace] == [
        ["code", "math"], ["code", "math", "long"], ["code", "math"]]
    texts = [p.text for phase in trace for p in phase]
    assert texts == ["coding0", "math0", "coding1", "math_reasoning0", "rag0",
                     "coding2", "math1"]  # the kind's categories taken in turn
    assert len(set(texts)) == len(texts)
    # rag1 (2000 tokens) would not fit: the next long prompt is rag2
    again = traffic.build_trace([Phase("busy", 8, 6)], kinds, pool, max_prompt_tokens=1000)
    assert [p.text for p in again[0] if p.kind == "long"] == ["rag0", "rag2"]
    assert again[0][2].num_tokens == 900 and again[0][2].index == 0


def test_a_kind_that_runs_out_names_itself_and_what_the_trace_needs():
    pool = pool_of(coding=[10, 10], rag=[900, 2000])
    kinds = {"code": ["coding"], "long": ["rag"]}
    phases = [Phase("quiet", 1, 2), Phase("busy", 4, 4)]
    with pytest.raises(ValueError, match=r"kind 'long': the trace needs 3 prompts of it, "
                                         r"the dataset has 1 of at most 1000 tokens \(rag\)"):
        traffic.build_trace(phases, kinds, pool, max_prompt_tokens=1000)
    with pytest.raises(ValueError, match="no category nope in the dataset; there are "
                                         "coding, rag"):
        traffic.build_trace(phases, {"x": ["nope"]}, pool, max_prompt_tokens=1000)


def test_the_prompt_budget_is_the_tightest_of_the_client_and_the_context():
    assert traffic.prompt_budget(1024, 4096, 64) == 1024
    assert traffic.prompt_budget(1024, 512, 64) == 448
    assert traffic.prompt_budget(4000, 8192, 64) == traffic.SHAREGPT_MAX_TOTAL_TOKENS - 64


def test_each_phase_file_is_the_clients_sharegpt_rows_and_the_record_has_no_texts(tmp_path):
    pool = pool_of(coding=[10] * 3, rag=[700, 800])
    phases = [Phase("quiet", 1, 1), Phase("busy", 8, 4, 2.0, 0.5)]
    trace = traffic.build_trace(phases, {"code": ["coding"], "long": ["rag"]}, pool, 1000)
    paths = traffic.write_phase_datasets(trace, phases, tmp_path / "prompts")
    assert [p.name for p in paths] == ["phase0_quiet.json", "phase1_busy.json"]
    rows = json.loads(paths[1].read_text())
    assert [row["conversations"][0]["value"] for row in rows] == [
        "coding1", "rag0", "coding2", "rag1"]
    assert all(row["conversations"][1] == {"from": "gpt", "value": ""} for row in rows)
    record = traffic.trace_record(trace, phases)
    assert record[1]["request_rate"] == "2.0" and record[0]["request_rate"] == "inf"
    assert record[1]["requests"][1] == {"kind": "long", "category": "rag", "index": 0,
                                        "prompt_tokens": 700}
    json.dumps(record)


def client_args(**extra):
    return argparse.Namespace(max_tokens=16, client_arg=["--top-k", "1"], **extra)


def test_the_client_gets_the_phase_once(tmp_path):
    argv = traffic.phase_client_argv(client_args(), "/t", 8000, tmp_path / "p.json",
                                     Phase("busy", 8, 24, 2.0, 0.5), 0.0, tmp_path, "r.json")
    assert argv[0] == "--backend"  # the program and "bench serve" are left out

    def last(option):
        return argv[len(argv) - 1 - argv[::-1].index(option) + 1]

    assert last("--max-concurrency") == "8" and last("--num-prompts") == "24"
    assert last("--request-rate") == "2.0" and last("--burstiness") == "0.5"
    assert argv.count("--request-rate") == 1  # vLLM's parser warns of a repeat
    assert last("--dataset-path") == str(tmp_path / "p.json")
    assert last("--sharegpt-output-len") == "16" and "--ignore-eos" in argv
    assert "--save-detailed" in argv and "--disable-shuffle" in argv
    assert last("--top-k") == "1"  # the harness's --client-arg
    quiet = traffic.phase_client_argv(client_args(), "/t", 8000, tmp_path / "p.json",
                                      Phase("quiet", 1, 6), 0.0, tmp_path, "r.json")
    assert quiet[len(quiet) - 1 - quiet[::-1].index("--request-rate") + 1] == "inf"


def test_per_request_details_skip_failures_and_count_tokens_by_second():
    result = {"start_times": [100.0, 100.5, 101.0], "ttfts": [0.2, 0.3, 9.0],
              "itls": [[0.5, 0.5, 0.5], [1.0], []], "latencies": [1.7, 1.3, 9.0],
              "output_lens": [4, 2, 0], "errors": ["", "", "timeout"]}
    details = traffic.per_request(result)
    assert details["ttft_ms"] == pytest.approx([200.0, 300.0])
    assert details["tpot_ms"] == pytest.approx([500.0, 1000.0])
    # request 0 emits at 0.2, 0.7, 1.2, 1.7; request 1 at 0.8 and 1.8 (from 100.0)
    assert details["tokens_by_second"] == [3, 3]


class FakeServer:
    base, port = "http://127.0.0.1:1", 1


def test_phases_run_back_to_back_with_their_counters_and_trace_ranges(tmp_path, monkeypatch):
    """Each phase: /metrics before and after, the client once, and the trace's
    lines written during it fall in its byte range."""
    trace_file = tmp_path / "trace.jsonl"
    trace_file.write_text(json.dumps({"event": "plan", "kind": "warmup", "batch_size": 1,
                                      "num_draft_tokens": 2, "catch_up_tokens": 0}) + "\n")
    counter = {"steps": 0.0}
    calls = []

    def fake_get(url):
        assert url == FakeServer.base + "/metrics"
        return f"vllm:gammatune_steps_total {counter['steps']}\n"

    def fake_client(argv, log):
        concurrency = int(argv[argv.index("--max-concurrency") + 1])
        calls.append((concurrency, log.name))
        drafted = concurrency == 1
        with trace_file.open("a") as sink:
            for _ in range(3):
                sink.write(json.dumps({"event": "plan", "kind": "draft" if drafted else "skip",
                                       "batch_size": concurrency, "catch_up_tokens": 0,
                                       "num_draft_tokens": 2 if drafted else 0}) + "\n")
        counter["steps"] += 3
        return {"duration": 2.0 * concurrency, "completed": 1, "failed": 0,
                "total_output_tokens": 4, "start_times": [0.0], "ttfts": [0.1],
                "itls": [[0.1] * 3], "latencies": [0.4], "output_lens": [4], "errors": [""]}

    monkeypatch.setattr(traffic, "http_get", fake_get)
    monkeypatch.setattr(traffic, "run_vllm_client", fake_client)
    phases = [Phase("quiet", 1, 1), Phase("busy", 4, 1), Phase("again", 1, 1)]
    rows = traffic.run_trace(FakeServer(), client_args(temperature="0"), "/t",
                             [tmp_path / f"p{i}.json" for i in range(3)], phases,
                             tmp_path / "logs", "cost_r0", trace_file, flush_wait=0.0)
    assert calls == [(1, "cost_r0_phase0_quiet.client.log"), (4, "cost_r0_phase1_busy.client.log"),
                     (1, "cost_r0_phase2_again.client.log")]
    assert [row["started_s"] for row in rows] == [0.0, 2.0, 10.0]
    assert [row["metrics_delta"]["gammatune_steps"] for row in rows] == [3.0, 3.0, 3.0]
    starts = [row["trace_bytes"][0] for row in rows]
    assert starts[0] > 0 and [row["trace_bytes"][1] for row in rows[:-1]] == starts[1:]
    decisions = [row["decisions"] for row in rows]
    assert [d["plan_steps"] for d in decisions] == [3, 3, 3]  # the warm-up step left out
    assert [d["drafted_steps"] for d in decisions] == [3, 0, 3]
    assert [d["steps_to_change"] for d in decisions] == [None, 1, 1]


def test_an_untraced_server_has_no_decisions(tmp_path, monkeypatch):
    monkeypatch.setattr(traffic, "http_get", lambda url: "")
    monkeypatch.setattr(traffic, "run_vllm_client", lambda argv, log: {
        "duration": 1.0, "start_times": [], "ttfts": [], "itls": [], "latencies": [],
        "output_lens": [], "errors": []})
    rows = traffic.run_trace(FakeServer(), client_args(temperature="0"), "/t",
                             [tmp_path / "p.json"], [Phase("quiet", 1, 1)], tmp_path, "n_r0",
                             None, flush_wait=0.0)
    assert rows[0]["decisions"] is None and rows[0]["trace_bytes"] is None
    assert rows[0]["tokens_by_second"] == [0]


def test_the_command_waits_out_the_trace_writers_flush():
    from benchmarks.run_traffic import TRACE_FLUSH_WAIT_S
    from vllm_gammatune.telemetry.trace import FLUSH_SECONDS

    assert TRACE_FLUSH_WAIT_S >= 2 * FLUSH_SECONDS


def test_the_published_plan_and_its_quick_size():
    from benchmarks import reproduce
    from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

    (full, again), (quick,) = reproduce.plan("traffic"), reproduce.plan("traffic", quick=True)

    def option(argv, name):
        return argv[argv.index(name) + 1]

    # the second run: the subject against the best static choice and no
    # speculation, on the same trace with the same table, not in the quick plan
    assert option(again["argv"], "--methods").split(",") == [
        "no_spec", "vllm_table", "gammatune_cost@8"]
    for name in ("--phases", "--kinds", "--max-tokens", "--spec", "--subject"):
        assert option(again["argv"], name) == option(full["argv"], name)
    assert int(option(again["argv"], "--rounds")) >= 4 and "--trace" in again["argv"]

    choices = option(full["argv"], "--methods").split(",")
    assert [c for c in choices if c.startswith("vllm_draft_model@")] == [
        f"vllm_draft_model@{k}" for k in (1, 2, 3, 4)]
    assert {"no_spec", "vllm_table", "gammatune@4", "gammatune_cost@8"} <= set(choices)
    assert int(option(full["argv"], "--rounds")) >= 4 and "--trace" in full["argv"]
    table = json.loads(option(full["argv"], "--spec").partition("=")[2])
    validate_and_normalize_dynamic_sd_schedule(table["num_speculative_tokens_per_batch_size"])
    full_phases = traffic.parse_phases(option(full["argv"], "--phases"))
    quick_phases = traffic.parse_phases(option(quick["argv"], "--phases"))
    assert [p.name for p in quick_phases] == [p.name for p in full_phases]
    assert [p.concurrency for p in quick_phases] == [p.concurrency for p in full_phases]
    assert option(quick["argv"], "--rounds") == "1"
    assert set(option(quick["argv"], "--methods").split(",")) < set(choices)
