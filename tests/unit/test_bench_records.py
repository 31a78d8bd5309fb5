"""gammatune_tools.bench.records: cell keys, resumable results files, per-category sums."""

from types import SimpleNamespace

from gammatune_tools.bench import records


def test_cell_keys_and_resume_skip_truncated_lines(tmp_path):
    assert records.cell_key("gammatune", 4, 1, 0.0) == "gammatune|k=4|b=1|t=0.0"
    assert records.cell_key("gammatune", 4, 16, 0.7, size_name="c", turns=2) == \
        "gammatune|k=4|c=16|t=0.7|turns=2"
    assert records.cell_key("gammatune", 2, 1, 0.0, {"eta": 0.3}) == \
        'gammatune|k=2|b=1|t=0.0|{"eta": 0.3}'
    path = tmp_path / "cells.jsonl"
    path.write_text('{"key": "a"}\n{"key": "b"}\n{"key": "c", "tok')
    assert records.done_keys(path) == {"a", "b"}
    assert [row["key"] for row in records.read_jsonl(path)] == ["a", "b"]
    assert records.done_keys(tmp_path / "none.jsonl") == set()


def test_rows_are_appended_one_line_each(tmp_path):
    path = tmp_path / "rows.jsonl"
    records.append_row(path, {"key": "a", "n": 1})
    records.append_row(path, {"key": "b"})
    assert records.read_jsonl(path) == [{"key": "a", "n": 1}, {"key": "b"}]


def test_per_category_sums_homogeneous_batches_and_pools_mixed_ones():
    batches = [
        {"indices": [0, 1], "turn": 1, "wall_seconds": 2.0, "output_tokens": 20,
         "drafts": 4, "draft_tokens": 8, "accepted": 6},
        {"indices": [0], "turn": 2, "wall_seconds": 1.0, "output_tokens": 10,
         "drafts": 2, "draft_tokens": 4, "accepted": 1},
        {"indices": [2, 3], "turn": 1, "wall_seconds": 3.0, "output_tokens": 30,
         "drafts": 1, "draft_tokens": 2, "accepted": 2},
    ]
    sums = records.per_category(batches, ["code", "code", "code", "math"])
    assert sums["code"]["wall_seconds"] == 3.0 and sums["code"]["output_tokens"] == 30
    assert sums["code"]["accepted"] == 7 and sums["code"]["requests"] == 3
    assert sums["mixed"]["output_tokens"] == 30 and "math" not in sums


def test_trace_paths_are_safe_file_names(tmp_path):
    path = records.trace_path(tmp_path, "no_spec#2 k=3")
    assert path == tmp_path / "traces" / "no_spec_2_k=3.jsonl"
    assert path.parent.is_dir()


def test_measurement_dict_carries_the_derived_counts():
    row = records.Measurement(
        method="gammatune", k=2, batch_size=1, num_requests=2, output_tokens=100,
        wall_seconds=10.0, drafts=40, draft_tokens=120, accepted=60, confidence_stops=0,
        draft_forward_passes=130, relaxed_acceptances=0, plugin_time_us=500.0,
        plugin_steps=50, skipped_draft_steps=10, planned_draft_tokens=150,
        stopped_draft_tokens=30, target_passes=44, engine_steps=44).to_dict()
    # vLLM counted 60 accepted; 100 tokens in 44 passes accepted 56 within max_tokens
    assert row["tokens_per_second"] == 10.0 and row["mean_accepted_length"] == 1 + 56 / 40
    assert row["acceptance_rate"] == 0.5 and row["mean_draft_length"] == 3.0
    assert row["target_passes_per_token"] == 0.44 and row["draft_forwards_per_token"] == 1.3
    assert row["drafted_step_share"] == 0.8 and row["plugin_us_per_step"] == 10.0
    fixed = records.Measurement(
        method="vllm_draft_model", k=3, batch_size=1, num_requests=2, output_tokens=100,
        wall_seconds=10.0, drafts=40, draft_tokens=120, accepted=60, confidence_stops=0,
        draft_forward_passes=0, relaxed_acceptances=0, plugin_time_us=0.0,
        target_passes=42, engine_steps=42)
    assert fixed.draft_forwards_per_token == 3 * 42 / 100  # K forwards in every step


def test_outputs_are_placed_by_turn_and_prompt():
    def output(text, ids):
        return SimpleNamespace(outputs=[SimpleNamespace(text=text, token_ids=ids)])

    batches = [{"indices": [0, 1], "turn": 1}, {"indices": [0], "turn": 2},
               {"indices": [2], "turn": 1}]
    outputs = [[output("a", (1,)), output("b", (2,))], [output("a2", (3,))],
               [output("c", (4, 5))]]
    texts, token_ids = records.outputs_by_turn(batches, outputs, 3, 2)
    assert texts == [["a", "b", "c"], ["a2", None, None]]
    assert token_ids == [[[1], [2], [4, 5]], [[3], None, None]]
