"""gammatune_tools.bench.greedy_replay and benchmarks.text_replay: batch-1 strategies
replayed along recorded greedy texts (no engine)."""

from __future__ import annotations

import json
import random

import pytest

from benchmarks import text_replay as cli
from gammatune_tools.bench import greedy_replay as gr
from vllm_gammatune.policies import CostAwarePolicy

COSTS = gr.ReplayCosts(1.0, 0.1, 0.2, 0.01, 0.05)


def text(name, matches, prob=0.9):
    return gr.Text(name, tuple(matches), tuple([prob] * len(matches)))


def test_accepted_draft_tokens_are_the_leading_matches_and_none_past_the_end():
    t = text("t", [True, True, False, True, True])
    assert t.accepted(0, 8) == 2
    assert t.accepted(1, 1) == 1
    assert t.accepted(2, 3) == 0
    assert t.accepted(3, 8) == 2  # the text ends after two
    assert t.prob(4, 3) == t.probs[-1]  # past the end: the last recorded one
    with pytest.raises(ValueError, match="one entry per output token"):
        gr.Text("bad", (True,), (0.5, 0.5))


def test_fixed_k_counts_match_hand_computation():
    # 9 output tokens, the first from the prompt step: 8 to decode from p = 1
    t = text("t", [True] * 9)
    two = gr.fixed_k([t], 2, COSTS)
    # steps from p = 1, 4, 7: 3 + 3 + 2 tokens (the last step's second accepted
    # token would be past the end: not an accepted token)
    assert (two.tokens, two.target_passes, two.draft_passes) == (8, 3, 6)
    assert two.accepted_tokens == 5
    # each step: target over 3 tokens, first pass over the last step's tokens
    first_passes = COSTS.draft_pass(1) + 2 * COSTS.draft_pass(3)
    assert two.seconds == pytest.approx(3 * COSTS.target(3) + first_passes
                                        + 3 * COSTS.draft_pass(1))
    none = gr.fixed_k([t], 0, COSTS)
    assert (none.tokens, none.target_passes, none.draft_passes) == (8, 8, 0)
    assert none.seconds == pytest.approx(8 * COSTS.target(1))


def test_the_per_token_oracle_drafts_exactly_what_is_accepted():
    t = text("t", [True, False, True, True, False, False, True])
    oracle = gr.per_token_oracle([t], 8, COSTS)
    # from p = 1: rejected first, no pass (1 token); p = 2: 2 accepted (3 tokens);
    # p = 5: no pass (1); p = 6: 1 accepted, then the end (1 token)
    assert (oracle.tokens, oracle.target_passes) == (6, 4)
    assert oracle.drafted_tokens == oracle.draft_passes == 3
    assert oracle.row()["acceptance"] == pytest.approx(2 / 3)  # the last is past the end
    for k in range(1, 5):
        assert oracle.target_passes <= gr.fixed_k([t], k, COSTS).target_passes


def test_warm_up_texts_are_replayed_untimed_then_every_text_is_timed():
    texts = [text("a", [True] * 5), text("b", [False] * 7)]
    once = gr.fixed_k(texts, 1, COSTS)
    warmed = gr.fixed_k(texts, 1, COSTS, warmup=1)
    assert (once.tokens, once.seconds) == (warmed.tokens, pytest.approx(warmed.seconds))
    assert [tokens for tokens, _ in warmed.per_text] == [4, 6]


def test_the_per_prompt_oracle_takes_each_texts_fastest():
    texts = [text("easy", [True] * 30), text("hard", [False] * 30)]
    outcomes = [gr.fixed_k(texts, k, COSTS) for k in (1, 4)]
    best = gr.per_text_best(outcomes)
    assert best.per_text == [outcomes[1].per_text[0], outcomes[0].per_text[1]]
    assert best.row()["tokens_per_second"] > max(o.row()["tokens_per_second"]
                                                 for o in outcomes)


def test_the_cost_aware_policy_drafts_long_on_easy_text_and_skips_hard_text():
    rng = random.Random(0)
    costs = gr.ReplayCosts(0.1, 0.001, 0.01, 0.0, 0.001)  # drafting cheap: it pays
    easy = [gr.Text(f"easy{i}", tuple(rng.random() < 0.97 for _ in range(120)),
                 tuple(0.97 for _ in range(120))) for i in range(3)]
    hard = [gr.Text(f"hard{i}", tuple(rng.random() < 0.05 for _ in range(120)),
                 tuple(0.05 for _ in range(120))) for i in range(3)]
    on_easy = gr.drive_policy(easy, lambda: CostAwarePolicy(8), costs, "gtc")
    on_hard = gr.drive_policy(hard, lambda: CostAwarePolicy(8), costs, "gtc")
    assert on_easy.tokens == on_hard.tokens == 3 * 119  # every decoded token, once
    assert on_easy.row()["target_passes_per_token"] < 0.3
    assert on_hard.row()["draft_passes_per_token"] < 0.2  # it stops drafting
    assert on_hard.catch_up_tokens > 0  # probes catch up what skipped steps missed
    k1 = gr.fixed_k(hard, 1, costs)
    assert on_hard.row()["tokens_per_second"] > k1.row()["tokens_per_second"]
    # the policy's host work is charged to each step it plans
    slower = gr.ReplayCosts(0.1, 0.001, 0.01, 0.0, 0.001, policy_step=0.01)
    charged = gr.drive_policy(hard, lambda: CostAwarePolicy(8), slower, "gtc")
    assert charged.seconds - on_hard.seconds == pytest.approx(0.01 * on_hard.target_passes,
                                                             rel=0.05)


def write_texts(directory, rows):
    with (directory / "texts.jsonl").open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def test_replay_on_the_command_line_writes_every_strategy(tmp_path, capsys):
    rng = random.Random(1)
    rows = []
    for i in range(3):
        out = [rng.randrange(5) for _ in range(40)]
        draft = [t if rng.random() < 0.7 else 99 for t in out]
        rows.append({"name": f"{i}-x", "category": "x", "prompt_tokens": 10,
                     "output_token_ids": out, "draft_token_ids": draft,
                     "probs": [0.8 if d == t else 0.3 for d, t in zip(draft, out)]})
    write_texts(tmp_path, rows)
    cli.main(["replay", str(tmp_path), "--costs", "0.1,0.001,0.03,0,0.002", "--cap", "4",
              "--policy", 'no_stop={"token_stop": false}'])
    result = json.loads((tmp_path / "replay.json").read_text())
    names = [row["strategy"] for row in result]
    assert names == ["no speculation", "fixed K=1", "fixed K=2", "fixed K=3", "fixed K=4",
                     "per-prompt oracle", "per-token oracle",
                     "per-token stop in hindsight, blind", "per-token stop in hindsight, peeking",
                     "gammatune_cost", "no_stop"]
    assert {row["tokens"] for row in result} == {3 * 39}
    best = max(result[1:5], key=lambda row: row["tokens_per_second"])
    assert best["vs_best_fixed"] == pytest.approx(1.0)
    assert "| gammatune_cost |" in (tmp_path / "replay.md").read_text()
    oracle = next(row for row in result if row["strategy"] == "per-prompt oracle")
    assert oracle["target_passes_per_token"] is None  # a choice in hindsight: no counts
    assert "per-token oracle" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--costs", "1,2,3"], "five or six non-negative numbers"),
    (["--costs", "1,1,1,1,1", "--policy", "x=[1]"], "NAME=JSON"),
    (["--costs", "1,1,1,1,1", "--cap", "0"], "--cap must be at least 1, got 0"),
])
def test_bad_replay_options_are_refused_naming_them(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit):
        cli.parse_args(["replay", str(tmp_path), *argv])
    assert message in capsys.readouterr().err


def test_a_stop_that_peeks_at_the_next_token_beats_a_blind_one_and_both_pay():
    """Where the draft's probability tells its token apart (q 0.95 accepted,
    q 0.2 not) but says nothing of the next token, a stop that knows the next
    token's probability before its pass runs passes only for tokens that will
    be accepted; a blind one must pay passes on hope; both beat every fixed K
    and neither beats the oracle."""
    rng = random.Random(3)
    texts = []
    for i in range(4):
        matches = [rng.random() < 0.7 for _ in range(200)]
        texts.append(gr.Text(f"t{i}", tuple(matches),
                             tuple(0.95 if m else 0.2 for m in matches)))
    costs = gr.ReplayCosts(0.1, 0.001, 0.03, 0.0, 0.0)
    fixed = max(gr.fixed_k(texts, k, costs).row()["tokens_per_second"] for k in range(1, 9))
    blind = gr.hindsight_rule(texts, 8, costs, False, fixed).row()["tokens_per_second"]
    peek = gr.hindsight_rule(texts, 8, costs, True, fixed).row()["tokens_per_second"]
    oracle = gr.per_token_oracle(texts, 8, costs).row()["tokens_per_second"]
    assert fixed < blind < peek <= oracle
