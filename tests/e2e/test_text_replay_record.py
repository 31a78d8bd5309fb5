"""``python -m benchmarks.text_replay record`` on the tiny models, the target scoring
its own answers: at every output position its greedy token is the text's, which
checks that each recorded position is aligned with the token it predicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_TOKENS = 16


def test_the_target_scoring_its_own_greedy_answers_matches_them(tiny, tmp_path):
    out = tmp_path / "texts"
    env = dict(os.environ)
    env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.text_replay", "record", "--out", str(out),
         "--target", tiny["target"], "--draft", tiny["target"], "--dtype", "float32",
         "--max-model-len", "1024", "--dataset", "specbench:coding+writing",
         "--per-category", "1", "--max-tokens", str(MAX_TOKENS)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    rows = [json.loads(line) for line in (out / "texts.jsonl").read_text().splitlines()]
    assert sorted(row["category"] for row in rows) == ["coding", "writing"]
    matches = total = 0
    for row in rows:
        assert len(row["output_token_ids"]) == len(row["draft_token_ids"]) == MAX_TOKENS
        assert row["prompt_tokens"] > 0
        for top, prob in zip(row["top_probs"], row["probs"]):
            assert top[0] == prob and top == sorted(top, reverse=True) and 0 < prob <= 1
        matches += sum(d == t for d, t in zip(row["draft_token_ids"], row["output_token_ids"]))
        total += MAX_TOKENS
    # greedy: the scorer's top token is the one it generated (a near-tie may
    # round differently between its prompt pass and its decode steps)
    assert matches >= 0.9 * total
    context = json.loads((out / "context.json").read_text())
    assert context["args"]["max_tokens"] == MAX_TOKENS and context["draft"] == tiny["target"]
