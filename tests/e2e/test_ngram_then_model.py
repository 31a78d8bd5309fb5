"""The n-gram lookup ahead of the draft model (``"drafter": "ngram+draft_model"``).

Greedy text equals the target alone, under costs that favour either source
and under measured costs; the verified tokens of each source are counted
(``vllm:gammatune_ngram_*`` beside vLLM's totals); with temperature > 0 the
distribution stays the target's, with one-hot draft rows for the lookup's
tokens beside the draft model's full distributions.

The engines run in their own engine process, as the n-gram drafter's do
(``test_ngram_drafter``: vLLM's lookup loads numba, which an in-process
engine start cannot survive after it).
"""

from __future__ import annotations

import pytest
from test_greedy_equality import check_spec_counters
# engine_process (autouse): each engine in its own process, numba never in this
# one; reference: the target alone, greedy
from test_ngram_drafter import (  # noqa: F401
    engine_process,
    greedy_metrics,
    reference,
    sampled_metrics,
)


#: short n-grams, so the tiny models' text finds matches
FRONT = {"drafter": "ngram+draft_model", "prompt_lookup_min": 1, "prompt_lookup_max": 3}
#: a draft pass costs 40% of a target step: a lookup's draft is verified
#: wherever it beats the model's or the model would not draft, the model
#: drafts for the others where it pays
LOOKUP_PAYS = {"target_step_s": 0.01, "target_token_s": 0.0001, "draft_pass_s": 0.004,
               "draft_token_s": 0.0}
#: draft passes cost nothing: the draft model's longer drafts win
MODEL_PAYS = {"target_step_s": 0.01, "target_token_s": 0.0, "draft_pass_s": 0.0,
              "draft_token_s": 0.0}

CASES = {"lookup_pays": {"fixed_step_costs": LOOKUP_PAYS},
         "model_pays": {"fixed_step_costs": MODEL_PAYS},
         "measured": {}}


@pytest.mark.parametrize("case", list(CASES))
def test_greedy_output_equals_target_alone(tiny, reference, case):
    spec = {"method": "gammatune_cost", "model": tiny["draft"], "num_speculative_tokens": 6,
            **FRONT, **CASES[case]}
    metrics = greedy_metrics(tiny["target"], spec, reference, "AdaptiveDraftModelProposer")
    _, draft_tokens, accepted = check_spec_counters(metrics)
    ngram_drafted = metrics["vllm:gammatune_ngram_draft_tokens"].value
    ngram_accepted = metrics["vllm:gammatune_ngram_accepted_tokens"].value
    # each source's tokens are a share of vLLM's totals
    assert 0 <= ngram_accepted <= ngram_drafted <= draft_tokens
    assert ngram_accepted <= accepted
    passes = metrics["vllm:gammatune_draft_forward_passes"].value
    if case == "lookup_pays":
        assert ngram_drafted > 0 and ngram_accepted > 0, "the lookup's drafts were verified"
    if case == "model_pays":
        assert passes > 0 and draft_tokens > ngram_drafted, "the draft model drafted"


def test_sampled_distribution_matches_target(tiny):
    """The lookup's tokens are verified as proposals made with certainty
    (one-hot rows) beside the draft model's distributions
    (``draft_sample_method: probabilistic``): lossless at temperature 1."""
    spec = {"method": "gammatune_cost", "model": tiny["draft"], "num_speculative_tokens": 4,
            "draft_sample_method": "probabilistic", **FRONT,
            "fixed_step_costs": LOOKUP_PAYS}
    metrics = sampled_metrics(tiny["target"], spec)
    assert metrics["vllm:gammatune_ngram_draft_tokens"].value > 0
