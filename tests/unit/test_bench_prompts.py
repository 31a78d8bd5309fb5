"""gammatune_tools.bench.prompts: which prompts a run sends, and in what form."""

import pytest
from bench_fixtures import write_jsonl

from gammatune_tools.bench import prompts


def test_load_prompts_turns_split_and_per_category(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [
        {"question_id": 1, "category": "a", "turns": ["a1", "a1-second"]},
        {"question_id": 2, "category": "a", "turns": ["a2", "a2-second"]},
        {"question_id": 3, "category": "b", "turns": ["b3"]},
        {"question_id": 4, "category": "a", "turns": ["a4", "a4-second"]},
    ])
    assert prompts.load_prompts("specbench", 1, spec_bench_path=path) == [
        ("a", ["a1"]), ("b", ["b3"])]
    assert prompts.load_prompts("specbench", None, "eval", turns=2,
                                spec_bench_path=path) == [
        ("a", ["a2", "a2-second"]), ("a", ["a4", "a4-second"])]
    assert prompts.load_prompts("specbench", 5, "tune", turns=2,
                                spec_bench_path=path) == [
        ("a", ["a1", "a1-second"]), ("b", ["b3"])]
    plain = write_jsonl(tmp_path / "mine.jsonl", [{"prompt": "p"}, {"question": "q"}])
    assert prompts.load_prompts(str(plain)) == [("mine", ["p"]), ("mine", ["q"])]


def test_load_prompts_without_categories_ignores_per_category(tmp_path):
    # GSM8K has no category: --per-category must not cap it at 2 problems
    plain = write_jsonl(tmp_path / "math.jsonl", [{"question": str(i)} for i in range(5)])
    assert [t for _, (t,) in prompts.load_prompts(str(plain), 2)] == ["0", "1", "2", "3", "4"]
    assert len(prompts.load_prompts(str(plain), 2, limit=3)) == 3


def test_the_shipped_prompt_sets_are_found():
    assert len(prompts.load_prompts("specbench", 1, "eval")) == 13
    assert len(prompts.load_prompts("gsm8k", limit=4)) == 4


def test_first_turns_and_sharegpt_rows_take_the_first_turn():
    loaded = [("code", ["hi", "again"]), ("math", ["two"])]
    assert prompts.first_turns(loaded) == [[{"role": "user", "content": "hi"}],
                                           [{"role": "user", "content": "two"}]]
    rows = prompts.sharegpt_rows(loaded, lambda t: f"<{t}>")
    assert rows[0] == {"id": "code-0", "category": "code",
                       "conversations": [{"from": "human", "value": "<hi>"},
                                         {"from": "gpt", "value": ""}]}
    assert rows[1]["id"] == "math-1"


def test_the_code_editing_prompts_ship_with_their_code_and_split_in_halves():
    from gammatune_tools.bench.prompts import DATA, load_prompts

    path = str(DATA / "code_edit_question.jsonl")
    prompts = load_prompts(path)
    assert len(prompts) == 12 and {category for category, _ in prompts} == {"code_editing"}
    assert all("```" in turns[0] and "Reply with the whole" in turns[0] for _, turns in prompts)
    assert len(load_prompts(path, split="eval")) == len(load_prompts(path, split="tune")) == 6


def test_a_specbench_dataset_may_name_its_categories(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [
        {"question_id": 2, "category": "rag", "turns": ["r2"]},
        {"question_id": 4, "category": "math", "turns": ["m4"]},
        {"question_id": 6, "category": "summarization", "turns": ["s6"]},
        {"question_id": 8, "category": "rag", "turns": ["r8"]},
    ])
    # in file order whatever the order named, per_category and split as for "specbench"
    assert prompts.load_prompts("specbench:summarization+rag", 5, "eval",
                                spec_bench_path=path) == [
        ("rag", ["r2"]), ("rag", ["r8"]), ("summarization", ["s6"])]
    assert prompts.load_prompts("specbench:rag", 1, spec_bench_path=path) == [("rag", ["r2"])]


def test_an_unknown_or_missing_category_names_the_value_and_what_is_allowed(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [{"question_id": 2, "category": "rag",
                                               "turns": ["r2"]}])
    with pytest.raises(ValueError, match=r"'specbench:rag\+summary': unknown category "
                                         r"'summary'; allowed: rag"):
        prompts.load_prompts("specbench:rag+summary", spec_bench_path=path)
    with pytest.raises(ValueError, match="'specbench:': no category named; allowed: rag"):
        prompts.load_prompts("specbench:", spec_bench_path=path)
