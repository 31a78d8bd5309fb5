"""gammatune_tools.bench.next_token: what tells the next draft token's
acceptance, and the blind stop fitted on it in hindsight."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from benchmarks import text_replay as cli
from gammatune_tools.bench import greedy_replay as gr
from gammatune_tools.bench import next_token as nt


def test_auc_counts_ties_half_and_orders_perfectly_separated_scores():
    labels = np.array([0.0, 0.0, 1.0, 1.0])
    assert nt.auc(np.array([0.1, 0.2, 0.3, 0.4]), labels) == 1.0
    assert nt.auc(np.array([0.4, 0.3, 0.2, 0.1]), labels) == 0.0
    assert nt.auc(np.array([0.5, 0.5, 0.5, 0.5]), labels) == 0.5
    # one positive ties one negative: 3 of 4 pairs ordered, the tie half
    assert nt.auc(np.array([0.1, 0.3, 0.3, 0.4]), labels) == pytest.approx(3.5 / 4)


def test_features_are_the_token_in_hand_and_the_history_before_it():
    text = gr.Text("t", (True, True, False), (0.5, 0.8, 0.25),
                   ((0.5, 0.5), (0.8, 0.1), (0.25, 0.25)))
    table = nt.features(text)
    assert table.shape == (3, len(nt.FEATURES))
    assert table[1, 0] == pytest.approx(math.log(0.8 / 0.2))  # logit of the probability
    # entropy: the top two and the rest (0.1) as one outcome
    assert table[1, 1] == pytest.approx(-(0.8 * math.log(0.8) + 2 * 0.1 * math.log(0.1)))
    assert table[1, 2] == pytest.approx(0.7)  # margin to the second
    decay = nt.HISTORY_DECAY
    assert table[0, 3] == pytest.approx(0.7)  # nothing seen yet
    assert table[2, 3] == pytest.approx(decay * (decay * 0.7 + (1 - decay)) + (1 - decay))
    assert list(table[:, 4]) == pytest.approx([0.0, math.log(2), math.log(3)])


def test_features_need_the_top_probabilities_naming_the_text():
    with pytest.raises(ValueError, match="text 'bare'.*top probabilities"):
        nt.features(gr.Text("bare", (True, False), (0.9, 0.9)))


def stretches(seed: int, count: int = 4, length: int = 300) -> list[gr.Text]:
    """Easy and hard stretches of text (acceptance 0.95 and 0.3) where the
    draft's probability is the same everywhere: only the history tells."""
    rng = random.Random(seed)
    texts = []
    for i in range(count):
        matches, easy = [], True
        while len(matches) < length:
            matches += [rng.random() < (0.95 if easy else 0.3) for _ in range(25)]
            easy = not easy
        matches = matches[:length]
        texts.append(gr.Text(f"s{i}", tuple(matches), (0.6,) * length,
                             ((0.6, 0.2, 0.1),) * length))
    return texts


def test_history_tells_the_next_token_where_the_probability_cannot():
    rows = {row["features"]: row for row in nt.report(stretches(5))}
    assert rows["probability"]["auc"] == 0.5  # one value everywhere
    assert rows["recent acceptance"]["auc"] > 0.6
    combined = rows[" + ".join(nt.FEATURES)]
    assert combined["judged"] == "leave one text out" and combined["auc"] > 0.6


def test_a_blind_stop_fitted_on_history_beats_the_one_on_the_probability_alone():
    texts = stretches(7)
    costs = gr.ReplayCosts(0.1, 0.001, 0.03, 0.0, 0.0)
    rate = max(gr.fixed_k(texts, k, costs).row()["tokens_per_second"] for k in range(1, 9))
    blind = gr.hindsight_rule(texts, 8, costs, False, rate).row()["tokens_per_second"]
    fitted = gr.hindsight_rule(texts, 8, costs, False, rate,
                               next_estimate=nt.estimate(texts), name="fitted").row()
    assert fitted["strategy"] == "fitted"
    assert fitted["tokens_per_second"] > blind * 1.01


def test_replay_adds_the_fitted_stop_and_the_table_where_top_probabilities_are_recorded(
        tmp_path):
    rng = random.Random(2)
    with (tmp_path / "texts.jsonl").open("w") as f:
        for i in range(3):
            out = [rng.randrange(5) for _ in range(60)]
            draft = [t if rng.random() < 0.7 else 99 for t in out]
            top = [[0.8, 0.1] if d == t else [0.3, 0.2] for d, t in zip(draft, out)]
            f.write(json.dumps({"name": f"{i}-x", "output_token_ids": out,
                                "draft_token_ids": draft, "probs": [t[0] for t in top],
                                "top_probs": top}) + "\n")
    cli.main(["replay", str(tmp_path), "--costs", "0.1,0.001,0.03,0,0.002", "--cap", "4"])
    names = [row["strategy"] for row in json.loads((tmp_path / "replay.json").read_text())]
    assert ("per-token stop in hindsight, blind, with the draft's features and history"
            in names)
    page = (tmp_path / "replay.md").read_text()
    assert "## What tells the next draft token's acceptance" in page
    assert "| recent acceptance | alone |" in page
