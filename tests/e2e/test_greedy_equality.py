"""Lossless: greedy text equals the target alone, for every request of a batch."""

from __future__ import annotations

import pytest
from llm_helpers import PROMPTS, metrics_by_name, record_draft_fetches, running_llm

MAX_TOKENS = 40

METHODS = {
    "gammatune": {"gamma_init": 2, "eta": 0.5, "delta": 2},
    "gammatune_plus": {"gamma_init": 4, "confidence_threshold": 0.6},
    "fixed_draft": {"gamma_init": 3},
    "hf_heuristic": {"gamma_init": 1},
    "assistant_threshold": {"gamma_init": 5, "confidence_threshold": 0.6},
}


@pytest.fixture(scope="module")
def reference(tiny):
    from vllm import SamplingParams

    with running_llm(tiny["target"]) as llm:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
    return [list(o.outputs[0].token_ids) for o in outs]


def check_spec_counters(metrics: dict) -> tuple[int, int, int]:
    drafts = int(metrics["vllm:spec_decode_num_drafts"].value)
    draft_tokens = int(metrics["vllm:spec_decode_num_draft_tokens"].value)
    accepted = int(metrics["vllm:spec_decode_num_accepted_tokens"].value)
    assert drafts > 0 and draft_tokens >= drafts
    assert 0 <= accepted <= draft_tokens
    per_pos = metrics["vllm:spec_decode_num_accepted_tokens_per_pos"].values
    assert sum(per_pos) == accepted
    assert all(a >= b for a, b in zip(per_pos, per_pos[1:]))
    return drafts, draft_tokens, accepted


@pytest.mark.parametrize("method", list(METHODS))
def test_greedy_output_equals_target_alone(tiny, reference, method):
    from vllm import SamplingParams

    spec = {"method": method, "model": tiny["draft"], "num_speculative_tokens": 8,
            **METHODS[method]}
    with running_llm(tiny["target"], spec) as llm:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
        metrics = metrics_by_name(llm)
    got = [list(o.outputs[0].token_ids) for o in outs]
    for i, (want, have) in enumerate(zip(reference, got)):
        assert have == want, f"prompt {i} differs from the target alone"

    drafts, draft_tokens, accepted = check_spec_counters(metrics)
    assert accepted > 0, "the tiny draft should agree with the target sometimes"
    hist = metrics["vllm:gammatune_draft_length"]
    lengths = {float(b) for b, c in hist.buckets.items() if b != "+Inf"}
    counts = [hist.buckets[b] for b in sorted(hist.buckets, key=lambda b: float(b))]
    used = {i for i, (prev, cur) in enumerate(zip([0] + counts, counts)) if cur > prev}
    assert lengths and hist.count >= drafts  # proposed >= verified drafts
    if method == "fixed_draft":
        assert used == {3}, used
    elif method in ("gammatune", "hf_heuristic"):
        assert len(used) > 1, f"{method} should vary the draft length: {used}"
    if METHODS[method].get("confidence_threshold"):
        assert metrics["vllm:gammatune_confidence_stops"].value > 0


def test_builtin_draft_model_unaffected_by_plugin(tiny, reference):
    from vllm import SamplingParams

    spec = {"method": "draft_model", "model": tiny["draft"], "num_speculative_tokens": 3}
    with running_llm(tiny["target"], spec) as llm:
        fetched = record_draft_fetches(llm)
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
        metrics = metrics_by_name(llm)
    assert [list(o.outputs[0].token_ids) for o in outs] == reference
    # vLLM's own drafter: the engine core still fetches drafts after every step
    assert fetched and all(answer is not None for answer in fetched)
    drafts, draft_tokens, _ = check_spec_counters(metrics)
    assert draft_tokens == 3 * drafts
    assert "vllm:gammatune_draft_length" not in metrics or (
        metrics["vllm:gammatune_draft_length"].count == 0
    )
