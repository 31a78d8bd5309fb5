"""The tiny models' recipe: its fingerprint follows everything that shapes the files."""

from __future__ import annotations

import re

import pytest
import tiny_model_recipe as recipe


def test_fingerprint_is_a_short_stable_hash():
    assert re.fullmatch(r"[0-9a-f]{16}", recipe.recipe_fingerprint())
    assert recipe.recipe_fingerprint() == recipe.recipe_fingerprint()


@pytest.mark.parametrize("name, value", [
    ("BUILD_VERSION", "next"),
    ("SEED", 4321),
    ("TARGET_VOCAB", 1024),
    ("INIT_GAINS", {**recipe.INIT_GAINS, "lm_head": 4.0}),
    ("CORPUS", recipe.CORPUS + "more text"),
])
def test_fingerprint_changes_with_the_recipe(monkeypatch, name, value):
    before = recipe.recipe_fingerprint()
    monkeypatch.setattr(recipe, name, value)
    assert recipe.recipe_fingerprint() != before


def test_special_tokens_come_first_and_are_distinct():
    assert recipe.SPECIAL_TOKENS[:3] == [recipe.PAD, recipe.BOS, recipe.EOS]
    assert len(set(recipe.SPECIAL_TOKENS)) == len(recipe.SPECIAL_TOKENS)
    assert recipe.OTHER_VOCAB != recipe.TARGET_VOCAB
