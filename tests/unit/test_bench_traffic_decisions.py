"""gammatune_tools.bench.traffic_decisions: the plugin's decisions per phase,
from a synthetic ``VLLM_GAMMATUNE_TRACE`` file cut into phases by byte ranges."""

import json

import pytest
from bench_fixtures import trace_line

from gammatune_tools.bench import traffic_decisions as decisions


def plan(kind: str, batch: int, drafted: int = 0, catch_up: int = 0) -> dict:
    """One plan line (the fields the analysis reads)."""
    return {"event": "plan", "kind": kind, "batch_size": batch, "num_draft_tokens": drafted,
            "max_num_draft_tokens": drafted, "catch_up_tokens": catch_up}


def write_phases(path, phases: list[list[dict]], before: list[dict] = ()) -> list[dict]:
    """The trace file and the phase rows (their byte ranges), as the harness leaves them."""
    rows, text = [], "".join(json.dumps(line) + "\n" for line in before)
    for index, lines in enumerate(phases):
        start = len(text.encode())
        text += "".join(json.dumps(line) + "\n" for line in lines)
        rows.append({"phase_index": index, "trace_bytes": [start, len(text.encode())]})
    path.write_text(text)
    return rows


QUIET = [plan("warmup", 1, 4), trace_line("a", 1, 4, 3), plan("draft", 1, 3),
         trace_line("a", 2, 3, 1), plan("skip", 1), plan("draft", 1, 2),
         trace_line("a", 3, 2, 2)]
BUSY = [plan("draft", 4, 8, catch_up=300), trace_line("b", 1, 2, 0), plan("skip", 8),
        plan("probe", 8, 1, catch_up=40), trace_line("c", 1, 1, 1), plan("skip", 8),
        plan("skip", 6)]
AGAIN = [plan("skip", 1), plan("price", 1, 1, catch_up=90), plan("skip", 1),
         plan("draft", 1, 3)]


def test_each_phase_gets_its_own_lines_and_counts(tmp_path):
    rows = write_phases(tmp_path / "t.jsonl", [QUIET, BUSY, AGAIN],
                        before=[plan("warmup", 1, 4)] * 5)
    quiet, busy, again = decisions.trace_decisions(tmp_path / "t.jsonl", rows)
    assert quiet == {"plan_steps": 4, "drafted_steps": 3, "probe_steps": 0,
                     "catch_up_tokens": 0, "batch_size_sum": 4, "verifications": 3,
                     "draft_tokens": 9, "accepted_tokens": 6, "steps_to_change": None}
    assert busy["plan_steps"] == 5 and busy["drafted_steps"] == 1 and busy["probe_steps"] == 1
    assert busy["catch_up_tokens"] == 340 and busy["batch_size_sum"] == 34
    # the busy phase's second step is the first that does not draft
    assert busy["steps_to_change"] == 2
    # back at batch 1: neither the skip nor the pricing draft is a change; step 4 drafts
    assert again["steps_to_change"] == 4 and again["drafted_steps"] == 1


def test_shares_and_means_of_the_counts():
    counts = decisions.phase_decisions(BUSY)
    assert decisions.decision_shares(counts) == {
        "mean_batch_size": pytest.approx(34 / 5), "drafted_step_share": pytest.approx(0.2),
        "mean_draft_length": pytest.approx(1.5), "acceptance_rate": pytest.approx(1 / 3)}
    # a method without plan lines (gammatune): only the verification figures
    shares = decisions.decision_shares(
        decisions.phase_decisions([trace_line("a", 1, 5, 2), trace_line("a", 2, 3, 3)]))
    assert shares == {"mean_batch_size": None, "drafted_step_share": None,
                      "mean_draft_length": 4.0, "acceptance_rate": pytest.approx(5 / 8)}
    assert set(decisions.decision_shares(decisions.phase_decisions([])).values()) == {None}


def test_steps_to_change_counts_from_the_phases_first_step():
    drafting = [plan("draft", 1, 2)] * 3 + [plan("skip", 1)]
    assert decisions.steps_to_change(drafting, [plan("skip", 8)]) == 1
    assert decisions.steps_to_change(drafting, [plan("draft", 8, 4), plan("probe", 8, 1),
                                                plan("draft", 8, 2)]) == 2
    assert decisions.steps_to_change(drafting, [plan("draft", 8, 4)] * 3) is None
    skipping = [plan("skip", 8)] * 3 + [plan("draft", 8, 2)]
    assert decisions.steps_to_change(skipping, [plan("probe", 1, 1), plan("draft", 1, 3)]) == 2
    assert decisions.steps_to_change([], [plan("skip", 1)]) is None
    assert decisions.steps_to_change(skipping, []) is None


def test_a_line_cut_short_is_skipped_and_plan_series_keep_the_steps(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = write_phases(path, [QUIET, BUSY])
    with path.open("a") as sink:
        sink.write('{"event": "plan", "kind": "sk')
    rows[1]["trace_bytes"][1] = path.stat().st_size
    assert decisions.phase_decisions(decisions.segment_lines(path, *rows[1]["trace_bytes"])
                                     )["plan_steps"] == 5
    series = decisions.plan_series(path, rows)
    assert [len(steps) for steps in series] == [4, 5]
    assert [s["batch_size"] for s in series[1]] == [4, 8, 8, 8, 6]


def test_a_missing_trace_file_gives_empty_phases(tmp_path):
    rows = [{"phase_index": 0, "trace_bytes": [0, 0]}, {"phase_index": 1, "trace_bytes": [0, 0]}]
    found = decisions.trace_decisions(tmp_path / "none.jsonl", rows)
    assert [d["plan_steps"] for d in found] == [0, 0]
    assert [d["steps_to_change"] for d in found] == [None, None]
