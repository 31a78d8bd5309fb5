"""The plugin's per-request records (and the tables their sweep also clears:
draft-KV holes, the trace writer's step counters) return to empty once
requests leave the engine, with tracing on."""

from __future__ import annotations

import json
import random

import pytest

from llm_helpers import drafter, running_llm

# drafting rarely pays: requests skip the draft model, leave holes in its KV
# cache and probe (which catches them up), so every table is used
RARELY_PAYS = {"target_step_s": 0.1, "target_token_s": 0.0,
               "draft_pass_s": 0.06, "draft_token_s": 0.0}
SPECS = {
    "gammatune_cost": {"method": "gammatune_cost", "num_speculative_tokens": 4,
                       "probe_interval": 2, "probe_budget": 1.0,
                       "fixed_step_costs": RARELY_PAYS},
    "adasd": {"method": "adasd", "num_speculative_tokens": 6},
    # its confidence stop builds the draft distribution, which the trace's
    # token probabilities are read from
    "gammatune_plus": {"method": "gammatune_plus", "num_speculative_tokens": 6,
                       "confidence_threshold": 0.5},
}


def table_sizes(plugin_drafter, writer) -> dict[str, int]:
    return {
        "records": len(plugin_drafter.records),
        "kept drafts": plugin_drafter.records.num_kept_drafts,
        "draft KV holes": plugin_drafter.draft_kv_holes.num_requests,
        "trace step counters": writer.num_requests,
    }


@pytest.mark.parametrize("method", list(SPECS))
def test_tables_empty_after_many_requests_with_tracing(tiny, tmp_path, monkeypatch, method):
    from vllm import SamplingParams

    from vllm_gammatune import envs
    from vllm_gammatune.telemetry import trace

    monkeypatch.setenv(envs.TRACE, str(tmp_path / "trace.jsonl"))
    trace._reset_for_tests()
    rng = random.Random(0)
    spec = {**SPECS[method], "model": tiny["draft"]}
    try:
        with running_llm(tiny["target"], spec, enable_prefix_caching=True) as llm:
            plugin_drafter = drafter(llm)
            writer = trace.writer()
            peak = dict.fromkeys(table_sizes(plugin_drafter, writer), 0)
            for _ in range(12):  # 12 batches of 16: 192 requests
                prompts = [" ".join(rng.choice(["def", "x", "fox", "1", "hello world"])
                                    for _ in range(rng.randint(1, 60))) for _ in range(16)]
                llm.generate(prompts, SamplingParams(temperature=0, max_tokens=12))
                sizes = table_sizes(plugin_drafter, writer)
                peak = {name: max(peak[name], size) for name, size in sizes.items()}
            # the next engine step tells the worker the last batch finished
            llm.llm_engine.step()
            after = table_sizes(plugin_drafter, writer)
    finally:
        trace._reset_for_tests()
    # every table of this method was used, and none holds more than a batch
    used = {"gammatune_cost": ("records", "draft KV holes", "trace step counters"),
            "adasd": ("records", "kept drafts"),
            "gammatune_plus": ("records", "trace step counters")}[method]
    for name in used:
        assert 0 < peak[name] <= 16, (name, peak)
    assert after == dict.fromkeys(after, 0)
    if "trace step counters" not in used:
        return  # AdaSD verifies with its own acceptance and writes no trace
    # each verified draft token carries the draft's probability of it
    # (GammaTune+ reads it from the distribution its stop builds, the
    # cost-aware rule from the logits); GammaTune+ drafts on only while the
    # draft's top probability reaches its threshold, and in greedy decoding
    # the drafted token is the top one
    lines = (tmp_path / "trace.jsonl").read_text().splitlines()
    verified = [row for row in map(json.loads, lines)
                if "event" not in row and row["num_draft_tokens"]]
    assert verified
    for row in verified:
        assert len(row["token_probs"]) == row["num_draft_tokens"]
        assert all(0.0 < q <= 1.0 for q in row["token_probs"])
        if method == "gammatune_plus":
            assert all(q >= 0.5 - 1e-3 for q in row["token_probs"][:-1]), row
