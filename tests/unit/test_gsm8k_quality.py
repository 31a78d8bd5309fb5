"""benchmarks.gsm8k_quality: reading answers and comparing tokens (no engine)."""

import json

import pytest

from benchmarks import gsm8k_quality


def test_final_number_takes_the_last_number():
    assert gsm8k_quality.final_number("so 3 + 4 = 7, the answer is $1,234.") == 1234.0
    assert gsm8k_quality.final_number("no digits") is None


def test_final_number_prefers_the_last_boxed_answer():
    text = "She makes \\boxed{18} dollars per day (for 7 days: 126)."
    assert gsm8k_quality.final_number(text) == 18.0
    assert gsm8k_quality.final_number("\\boxed{x} then 5") == 5.0  # no number inside


def test_differing_share_counts_positions_and_length():
    ref = [[1, 2, 3, 4], [5, 6]]
    out = [[1, 2, 9, 4], [5, 6, 7]]
    assert gsm8k_quality.differing_share(ref, out) == pytest.approx(2 / 7)


def test_quality_table_compares_each_method_with_the_target(tmp_path, monkeypatch, capsys):
    answers = [json.loads(line)["answer"].split("####")[-1].strip()
               for line in gsm8k_quality.GSM8K.open()][:2]

    def row(method, texts, token_ids):
        return {"method": method, "k": 0, "batch_size": 1, "texts": texts,
                "token_ids": token_ids, "output_tokens": 8, "tokens_per_second": 4.0}

    rows = [row("no_spec", [f"\\boxed{{{answers[0]}}}", "0"], [[1, 2], [3, 4]]),
            row("adasd", [f"\\boxed{{{answers[0]}}}", f"so {answers[1]}"], [[1, 2], [3, 5]])]
    (tmp_path / "cells.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr("sys.argv", ["gsm8k_quality", str(tmp_path)])
    gsm8k_quality.main()
    table = (tmp_path / "quality.md").read_text()
    assert table.strip() == capsys.readouterr().out.strip()
    adasd = next(line for line in table.splitlines() if line.startswith("| adasd "))
    assert "| 2 | 2 | 100.0% |" in adasd and "| 1 / 0 |" in adasd and "| 25.0% |" in adasd
