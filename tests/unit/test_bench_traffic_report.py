"""gammatune_tools.bench.traffic_report: complete traces and rounds, the
speed-ups with their intervals, the best static choice per phase, the
targets, and the pages written from synthetic client rows."""

import json

import pytest
from bench_fixtures import write_jsonl

from gammatune_tools.bench import traffic_report as report
from gammatune_tools.bench.stats import ratio_interval

PHASES = ["quiet", "busy"]
SPECS = {"no_spec": None,
         "vllm_draft_model@3": {"method": "draft_model", "num_speculative_tokens": 3},
         "gammatune_cost@8": {"method": "gammatune_cost", "num_speculative_tokens": 8}}
CHOICES = list(SPECS)
#: seconds per (choice, phase), per round
SECONDS = {("no_spec", "quiet"): [10.0, 12.0, 11.0], ("no_spec", "busy"): [5.0, 5.0, 6.0],
           ("vllm_draft_model@3", "quiet"): [7.0, 8.0, 8.0],
           ("vllm_draft_model@3", "busy"): [7.0, 7.0, 8.0],
           ("gammatune_cost@8", "quiet"): [7.0, 7.5, 8.0],
           ("gammatune_cost@8", "busy"): [5.0, 5.5, 6.0]}


def row(choice, round_index, phase_index, seconds, ttft=(100.0,), tpot=(50.0,), delta=None,
        decisions=None):
    return {"choice": choice, "round": round_index, "position": 0,
            "speculative_config": SPECS[choice], "phase_index": phase_index,
            "phase": PHASES[phase_index], "started_s": 0.0, "duration": seconds,
            "completed": 2, "failed": 0, "total_output_tokens": 20, "ttft_ms": list(ttft),
            "tpot_ms": list(tpot), "tokens_by_second": [2] * int(seconds),
            "metrics_delta": delta or {}, "decisions": decisions, "trace_file": None}


def counts(steps, drafted, change):
    return {"plan_steps": steps, "drafted_steps": drafted, "probe_steps": 1,
            "catch_up_tokens": 10, "batch_size_sum": steps, "verifications": drafted,
            "draft_tokens": 3 * drafted, "accepted_tokens": 2 * drafted,
            "steps_to_change": change}


def rows_of_three_rounds():
    rows = []
    for (choice, phase), seconds in SECONDS.items():
        for r, s in enumerate(seconds):
            index = PHASES.index(phase)
            extra = {}
            if choice == "gammatune_cost@8":
                extra = {"delta": {"gammatune_steps": 10.0, "gammatune_skipped_draft_steps":
                                   8.0 if phase == "busy" else 1.0,
                                   "gammatune_catch_up_tokens": 5.0, "accepted": 10.0,
                                   "drafts": 4.0, "draft_tokens": 12.0, "target_passes": 10.0},
                         "decisions": counts(10, 9 if phase == "quiet" else 2,
                                             None if phase == "quiet" else r + 1),
                         "ttft": (100.0, 300.0 + r)}
            rows.append(row(choice, r, index, s, **extra))
    return rows


def test_only_traces_with_every_phase_and_rounds_with_every_choice_count():
    rows = rows_of_three_rounds() + [row("no_spec", 3, 0, 9.0)]  # round 3 cut short
    traces = report.complete_traces(rows, len(PHASES))
    assert ("no_spec", 3) not in traces and ("no_spec", 2) in traces
    assert [r["phase"] for r in traces[("no_spec", 0)]] == PHASES
    assert report.complete_rounds(traces, CHOICES) == [0, 1, 2]
    rows.append(row("vllm_draft_model@3", 3, 0, 9.0))
    rows.append(row("vllm_draft_model@3", 3, 1, 9.0))
    assert report.complete_rounds(report.complete_traces(rows, 2), CHOICES) == [0, 1, 2]


def test_speed_ups_per_round_and_scope_with_their_interval():
    summary = report.summarize_traffic(rows_of_three_rounds(), CHOICES, PHASES, "no_spec",
                                       "gammatune_cost@8")
    cost = summary["stats"]["gammatune_cost@8"]
    assert cost["whole"]["seconds_per_round"] == [12.0, 13.0, 14.0]
    assert cost["whole"]["over_baseline_per_round"] == pytest.approx(
        [15 / 12, 17 / 13, 17 / 14])
    assert cost["whole"]["over_baseline"] == pytest.approx(
        ratio_interval([15 / 12, 17 / 13, 17 / 14]))
    assert cost["busy"]["over_baseline_per_round"] == pytest.approx([1.0, 5 / 5.5, 1.0])
    assert summary["stats"]["no_spec"]["whole"]["over_baseline"] is None
    assert summary["static"] == ["no_spec", "vllm_draft_model@3"]
    # K=3 is the faster static choice when quiet and over the whole trace, no
    # speculation when busy
    assert summary["best_static"] == {"whole": "vllm_draft_model@3",
                                      "quiet": "vllm_draft_model@3", "busy": "no_spec"}
    k3 = summary["against_static"]["vllm_draft_model@3"]
    assert k3["whole"] == pytest.approx(ratio_interval([14 / 12, 15 / 13, 16 / 14]))
    assert k3["quiet"][0] == pytest.approx((7 / 7 + 8 / 7.5 + 8 / 8) / 3)


def test_pooled_client_numbers_and_counts():
    summary = report.summarize_traffic(rows_of_three_rounds(), CHOICES, PHASES, "no_spec",
                                       "gammatune_cost@8")
    busy = summary["stats"]["gammatune_cost@8"]["busy"]
    assert busy["seconds"] == pytest.approx(16.5) and busy["output_tokens"] == 60
    assert busy["output_throughput"] == pytest.approx(60 / 16.5)
    assert busy["completed"] == 6
    assert busy["ttft_p50_ms"] == pytest.approx(200.0)  # 100 x 3 and 300, 301, 302
    assert busy["ttft_p99_ms"] == pytest.approx(301.95)
    assert busy["target_passes_per_token"] == pytest.approx(0.5)
    assert busy["accepted_length"] == pytest.approx(1 + 30 / 12)
    assert busy["drafted_step_share"] == pytest.approx(0.2)
    assert busy["catch_up_tokens"] == 15.0
    assert summary["stats"]["no_spec"]["busy"]["drafted_step_share"] is None
    decided = busy["decisions"]
    assert decided["plan_steps"] == 30 and decided["drafted_step_share"] == pytest.approx(0.2)
    assert decided["steps_to_change"] == [1, 2, 3]
    assert summary["stats"]["no_spec"]["busy"]["decisions"] is None


def test_the_targets_read_the_best_static_choice_of_each_scope():
    summary = report.summarize_traffic(rows_of_three_rounds(), CHOICES, PHASES, "no_spec",
                                       "gammatune_cost@8")
    found = {t["target"].split(":")[0]: t for t in summary["targets"]}
    # whole: 1.145 over K=3, interval above 1
    assert found["whole trace"]["met"] and "(vllm_draft_model@3)" in found["whole trace"]["target"]
    assert found["quiet"]["met"]
    # busy: (1 + 5 / 5.5 + 1) / 3 = 0.9697 of no speculation, written 0.970 and
    # short of 0.97
    assert found["busy"]["value"] == "0.970" and not found["busy"]["met"]
    ttft = found["TTFT p99 at most 1.10x no_spec's"]
    assert not ttft["met"] and ttft["value"].endswith("(3.02x)")
    json.dumps(summary)  # the summary file is JSON


def test_no_subject_or_no_complete_round_means_no_comparison():
    rows = rows_of_three_rounds()
    alone = report.summarize_traffic(rows, CHOICES, PHASES, "no_spec", None)
    assert alone["against_static"] == {} and alone["targets"] == []
    cut = [r for r in rows if not (r["choice"] == "no_spec" and r["phase"] == "busy")]
    empty = report.summarize_traffic(cut, CHOICES, PHASES, "no_spec", "gammatune_cost@8")
    assert empty["rounds"] == [] and empty["best_static"] == {} and empty["targets"] == []


def context():
    return {"command": "python -m benchmarks.run_traffic --rounds 3", "date": "2026-11-25",
            "vllm": "0.32.0", "cpu_model": "AMD EPYC", "cpu_isa": ["avx2"],
            "args": {"max_tokens": 64, "temperature": "0", "kinds": "code=coding"}}


TRACE = [{"name": "quiet", "concurrency": 1, "num_requests": 2, "request_rate": "inf",
          "burstiness": 1.0, "requests": [{"kind": "code", "prompt_tokens": 50},
                                          {"kind": "long", "prompt_tokens": 700}]},
         {"name": "busy", "concurrency": 8, "num_requests": 1, "request_rate": "2.0",
          "burstiness": 0.5, "requests": [{"kind": "code", "prompt_tokens": 60}]}]


def test_the_page_holds_the_design_every_scope_and_the_decisions():
    summary = report.summarize_traffic(rows_of_three_rounds(), CHOICES, PHASES, "no_spec",
                                       "gammatune_cost@8")
    page = report.traffic_report(summary, context(), TRACE)
    assert "`python -m benchmarks.run_traffic --rounds 3`" in page
    assert "| quiet | 1 | 2 | all at once | code 1, long 1 | 375 / 700 |" in page
    assert "| busy | 8 | 1 | 2.0/s, burstiness 0.5 | code 1 | 60 / 60 |" in page
    assert page.count("| choice | seconds per round |") == 3  # whole and both phases
    assert "| gammatune_cost@8 | 12.0, 13.0, 14.0 |" in page
    assert "| vllm_draft_model@3 | " in page and "(best static) |" in page
    assert "| gammatune_cost@8 | busy | 30 | 1.00 | 20% | 3 | 30 | 6 | 3.00 | 0.67 | 1, 2, 3 |" \
        in page
    assert "- NOT met: TTFT p99" in page and "![" not in page


def test_rounds_from_more_than_one_machine_are_said_to_be():
    summary = report.summarize_traffic(rows_of_three_rounds(), CHOICES, PHASES, "no_spec",
                                       "gammatune_cost@8")
    one = {"date": "d1", "cpu_model": "AMD EPYC", "platform": "Linux-a", "git_commit": "c1"}
    # a run resumed on the same machine and source: nothing to say
    page = report.traffic_report(summary, context(), TRACE, runs=[one, {**one, "date": "d2"}])
    assert "Runs that added rounds" not in page and "More than one machine" not in page
    other = {**one, "date": "d3", "platform": "Linux-b", "git_commit": "c2"}
    page = report.traffic_report(summary, context(), TRACE, runs=[one, other])
    assert "from d1, AMD EPYC (), Linux-a, source c1; from d3" in page
    assert "- **More than one machine:**" in page
    # another source on the same machine is named, but it is one machine
    page = report.traffic_report(summary, context(), TRACE,
                                 runs=[one, {**one, "git_commit": "c2"}])
    assert "Runs that added rounds" in page and "More than one machine" not in page


def test_the_files_are_written_and_the_plot_is_skipped_without_matplotlib(tmp_path,
                                                                          monkeypatch):
    write_jsonl(tmp_path / report.ROWS_FILE, rows_of_three_rounds())
    (tmp_path / report.TRACE_FILE).write_text(json.dumps(TRACE))
    (tmp_path / "context.json").write_text(json.dumps(context()))
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # import fails
    path = report.write_traffic_report(tmp_path, CHOICES, PHASES, "no_spec", "gammatune_cost@8")
    assert path == tmp_path / report.REPORT_FILE and "## Phase busy" in path.read_text()
    saved = json.loads((tmp_path / report.SUMMARY_FILE).read_text())
    assert saved["best_static"]["busy"] == "no_spec"
    assert not (tmp_path / report.PLOT_FILE).exists()


def test_the_plot_is_drawn_from_the_subjects_trace(tmp_path):
    pytest.importorskip("matplotlib")
    rows = rows_of_three_rounds()
    trace = tmp_path / "traces" / "cost.jsonl"
    trace.parent.mkdir()
    plan = {"event": "plan", "kind": "draft", "batch_size": 1, "num_draft_tokens": 3,
            "max_num_draft_tokens": 3, "catch_up_tokens": 0}
    trace.write_text(json.dumps(plan) + "\n")
    for r in rows:
        if r["choice"] == "gammatune_cost@8":
            r["trace_file"] = "traces/cost.jsonl"
            r["trace_bytes"] = [0, trace.stat().st_size] if r["phase"] == "quiet" else \
                [trace.stat().st_size] * 2
    write_jsonl(tmp_path / report.ROWS_FILE, rows)
    (tmp_path / report.TRACE_FILE).write_text(json.dumps(TRACE))
    path = report.write_traffic_report(tmp_path, CHOICES, PHASES, "no_spec", "gammatune_cost@8")
    assert (tmp_path / report.PLOT_FILE).stat().st_size > 0
    assert f"]({report.PLOT_FILE})" in path.read_text()
