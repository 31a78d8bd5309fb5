"""gammatune_tools.bench.paired_categories: a paired run per category and group."""

import json

import pytest
from bench_fixtures import paired_row

from gammatune_tools.bench import paired_categories as pc

#: t(0.975, 1 degree of freedom): two rounds
T_1 = 12.706204736

#: each prompt's category, in the run's order: batches at size 1 are 0-3
CATEGORIES = ["a", "a", "b", "c"]

#: (batch, round) -> (no_spec seconds, ngram seconds), 8 tokens each
SECONDS = {(0, 0): (1.0, 0.5), (1, 0): (1.0, 1.5), (2, 0): (1.0, 0.8), (3, 0): (1.0, 1.0),
           (0, 1): (2.0, 1.0), (1, 1): (2.0, 1.0), (2, 1): (1.0, 0.8), (3, 1): (1.0, 2.0)}


def batch_one_rows(rounds=(0, 1)) -> list[dict]:
    rows = []
    for (batch, round_index), (base, subject) in SECONDS.items():
        if round_index not in rounds:
            continue
        # no speculation: the counters an engine without the plugin reports
        rows.append(paired_row(1, round_index, batch, "no_spec", base, draft_tokens=0.0,
                               drafts=0.0, ngram_draft_tokens=0.0, ngram_accepted_tokens=0.0))
        rows.append(paired_row(1, round_index, batch, "ngram", subject, accepted=2.0,
                               drafts=2.0, draft_tokens=4.0, draft_forward_passes=1.0,
                               ngram_draft_tokens=1.0,
                               ngram_accepted_tokens=1.0 if batch == 0 else 0.0))
    return rows


def entry(summary: dict, name: str, size: int = 1) -> dict:
    return next(e for e in summary["entries"] if e["name"] == name and e["batch_size"] == size)


def test_ratio_per_round_mean_and_t_interval_per_category():
    summary = pc.category_summary(batch_one_rows(), CATEGORIES, "ngram", ["no_spec"])
    assert [e["name"] for e in summary["entries"]] == ["a", "b", "c"]
    a = entry(summary, "a")
    assert a["prompts"] == 2 and a["batches"] == [0, 1] and a["rounds"] == 2
    # round 0: 16 tokens in 2.0 s both; round 1: 16 in 4.0 s against 16 in 2.0 s
    assert a["methods"]["no_spec"]["tokens_per_second"] == pytest.approx([8.0, 4.0])
    assert a["methods"]["ngram"]["tokens_per_second"] == pytest.approx([8.0, 8.0])
    ratio = a["ratios"]["no_spec"]
    assert ratio["per_round"] == pytest.approx([1.0, 2.0])
    mean, low, high = ratio["mean_interval"]
    half = T_1 * 0.5  # stdev of (1, 2) is 1/sqrt(2), over sqrt(2 rounds)
    assert (mean, low, high) == pytest.approx((1.5, 1.5 - half, 1.5 + half))
    b = entry(summary, "b")["ratios"]["no_spec"]
    assert b["per_round"] == pytest.approx([1.25, 1.25])
    assert b["mean_interval"] == pytest.approx((1.25, 1.25, 1.25))  # no spread
    assert list(a["methods"]) == ["ngram", "no_spec"]  # the subject first


def test_counts_per_generated_token_and_ngram_shares():
    a = entry(pc.category_summary(batch_one_rows(), CATEGORIES, "ngram", ["no_spec"]), "a")
    ngram, base = a["methods"]["ngram"], a["methods"]["no_spec"]
    # 4 rows of 8 tokens, 2 accepted, 2 drafts, 1 draft forward, 4 draft tokens of
    # which 1 from the n-gram lookup (accepted in batch 0's rows only)
    assert ngram["target_passes_per_token"] == pytest.approx((32 - 8) / 32)
    assert ngram["draft_forwards_per_token"] == pytest.approx(4 / 32)
    assert ngram["accepted_length"] == pytest.approx(1 + 8 / 8)
    assert ngram["ngram_draft_share"] == pytest.approx(4 / 16)
    assert ngram["ngram_acceptance"] == pytest.approx(2 / 4)
    assert base["target_passes_per_token"] == 1.0 and base["accepted_length"] is None
    assert base["ngram_draft_share"] is None and base["ngram_acceptance"] is None
    old = [{k: v for k, v in row.items() if not k.startswith("ngram_")}
           for row in batch_one_rows()]  # rows from before the n-gram counters
    assert entry(pc.category_summary(old, CATEGORIES, "ngram", ["no_spec"]),
                 "a")["methods"]["ngram"]["ngram_draft_share"] is None


def test_groups_pool_their_categories_batches():
    groups = pc.with_rest({"repeating": ["a", "b", "code_editing"]}, CATEGORIES)
    assert groups == {"repeating": ["a", "b", "code_editing"], "other": ["c"]}
    summary = pc.category_summary(batch_one_rows(), CATEGORIES, "ngram", ["no_spec"], groups)
    repeating = entry(summary, "repeating")
    assert repeating["kind"] == "group" and repeating["categories"] == ["a", "b"]
    assert repeating["prompts"] == 3 and repeating["batches"] == [0, 1, 2]
    # 24 tokens: no_spec in 3.0 s then 5.0 s, ngram in 2.8 s both rounds
    expected = [(24 / 2.8) / (24 / 3.0), (24 / 2.8) / (24 / 5.0)]
    assert repeating["ratios"]["no_spec"]["per_round"] == pytest.approx(expected)
    assert repeating["ratios"]["no_spec"]["mean_interval"][0] == pytest.approx(
        sum(expected) / 2)
    assert entry(summary, "other")["ratios"]["no_spec"]["per_round"] == pytest.approx(
        [1.0, 0.5])
    assert summary["not_in_prompts"] == ["code_editing"]
    text = pc.category_report(summary, "t")
    assert "| 1 | repeating (group) | 3 | 2 | no_spec | 8.00, 4.80 |" in text
    assert "not in this run's prompts: code_editing" in text


def test_one_round_gives_the_ratio_without_an_interval():
    summary = pc.category_summary(batch_one_rows(rounds=(0,)), CATEGORIES, "ngram",
                                  ["no_spec"])
    b = entry(summary, "b")
    mean, low, high = b["ratios"]["no_spec"]["mean_interval"]
    assert b["rounds"] == 1 and mean == pytest.approx(1.25) and low is None and high is None
    assert "| 1 | b | 1 | 1 | no_spec | 8.00 | 1.250 | 1.250 |" in pc.category_report(
        summary, "t")


def test_a_category_sharing_a_batch_with_another_is_left_out():
    # at batch 2: batches {a, a} and {a, b}: a's third prompt shares a batch with b
    categories = ["a", "a", "a", "b", "c", "c"]
    rows = [paired_row(2, 0, batch, method, 1.0) for batch in range(3)
            for method in ("no_spec", "ngram")]
    assert pc.selection_batches(categories, 2, {"a"}) is None
    assert pc.selection_batches(categories, 2, {"a", "b"}) == [0, 1]
    summary = pc.category_summary(rows, categories, "ngram", ["no_spec"],
                                  {"ab": ["a", "b"]})
    assert [(e["name"], e["batches"]) for e in summary["entries"]] == [("c", [2]),
                                                                       ("ab", [0, 1])]
    assert [left["name"] for left in summary["left_out"]] == ["a", "b"]
    assert "Left out (a batch holds their prompts and another category's): batch 2: a, b." \
        in pc.category_report(summary, "t")


def test_incomplete_rounds_ignored_and_rows_of_another_prompt_list_refused():
    rows = batch_one_rows() + [paired_row(1, 2, 0, "no_spec", 9.0)]  # round 2 cut short
    assert entry(pc.category_summary(rows, CATEGORIES, "ngram", ["no_spec"]), "a")[
        "rounds"] == 2
    with pytest.raises(ValueError, match="not this run's prompt list"):
        pc.category_summary(batch_one_rows(), CATEGORIES[:3], "ngram", ["no_spec"])


def test_every_other_method_is_a_baseline():
    # a second baseline twice as slow as no_spec on every batch
    slower = [{**row, "method": "draft", "wall_seconds": 2 * row["wall_seconds"]}
              for row in batch_one_rows() if row["method"] == "no_spec"]
    rows = batch_one_rows() + slower
    summary = pc.category_summary(rows, CATEGORIES, "ngram", ["no_spec", "draft"])
    a = entry(summary, "a")
    assert list(a["methods"]) == ["ngram", "no_spec", "draft"]
    assert a["ratios"]["draft"]["per_round"] == pytest.approx([2.0, 4.0])


def test_parse_groups():
    assert pc.parse_groups("repeating=summarization+rag+code_editing,x=qa") == {
        "repeating": ["summarization", "rag", "code_editing"], "x": ["qa"]}
    assert pc.parse_groups(None) == {} and pc.parse_groups("") == {}
    for bad in ("repeating", "=rag", "r=", "r=a,r=b"):
        with pytest.raises(ValueError, match="--category-groups"):
            pc.parse_groups(bad)
    assert pc.with_rest({}, CATEGORIES) == {}  # no groups: no "other" either
    assert pc.with_rest({"other": ["a"]}, CATEGORIES) == {"other": ["a"]}


def test_write_category_summary_last_method_against_the_others(tmp_path):
    (tmp_path / "paired.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in batch_one_rows()))
    path = pc.write_category_summary(tmp_path, ["no_spec", "ngram"], CATEGORIES,
                                     groups={"repeating": ["a", "b"]})
    assert path == tmp_path / "paired_categories.md"
    text = path.read_text()
    assert text.startswith("# Per category: `ngram` against `no_spec`")
    assert "| 1 | other (group) |" in text
    saved = json.loads((tmp_path / "paired_categories.json").read_text())
    assert saved["subject"] == "ngram" and saved["baselines"] == ["no_spec"]
    # --baseline ngram: the summary's order is ngram, no_spec, so no_spec is the subject
    pc.write_category_summary(tmp_path, ["no_spec", "ngram"], CATEGORIES, baseline="ngram")
    assert json.loads((tmp_path / "paired_categories.json").read_text())["subject"] == "no_spec"
    assert pc.write_category_summary(tmp_path, ["ngram"], CATEGORIES) is None
    assert pc.write_category_summary(tmp_path / "none", ["no_spec", "ngram"], CATEGORIES) is None
