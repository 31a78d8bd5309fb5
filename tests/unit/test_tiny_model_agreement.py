"""The tiny models measured with plain transformers: the draft agrees often, not always."""

from __future__ import annotations

import pytest
from tiny_model_agreement import greedy_agreement, hf_greedy


@pytest.fixture(scope="module")
def agreement(tiny_models):
    return {
        key: greedy_agreement(tiny_models["target"], tiny_models[key])
        for key in ("draft", "draft_identical")
    }


def test_greedy_agreement(agreement):
    assert 0.2 < agreement["draft"]["agreement"] < 0.95
    assert agreement["draft_identical"]["agreement"] == 1.0


def test_target_is_peaked_and_not_degenerate(agreement):
    stats = agreement["draft_identical"]
    # greedy argmax well separated from the runner-up: no kernel-noise flips
    assert stats["min_margin"] > 1e-2
    # the continuation is not a single repeated token
    assert stats["distinct"] > 8


def test_hf_greedy_identical_for_the_identical_draft(tiny_models):
    prompts = ["Hello", "def add(a, b):\n    return"]
    target = hf_greedy(tiny_models["target"], prompts, max_new_tokens=8)
    assert [len(ids) for ids in target] == [8, 8]
    assert hf_greedy(tiny_models["draft_identical"], prompts, max_new_tokens=8) == target
