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


@pytest.mark.parametrize("hot_path", ["0", "1"], ids=["host_path", "cuda_hot_path"])
def test_sampled_distribution_matches_target(tiny, hot_path, monkeypatch):
    """The lookup's tokens are verified as proposals made with certainty
    (one-hot rows) beside the draft model's distributions
    (``draft_sample_method: probabilistic``): lossless at temperature 1, on
    the host path and on the CUDA hot path (forced), where the rows are
    padded to K on the device (``uniform_shape.pad_on_device``)."""
    monkeypatch.setenv("VLLM_GAMMATUNE_CUDA_HOT_PATH", hot_path)
    spec = {"method": "gammatune_cost", "model": tiny["draft"], "num_speculative_tokens": 4,
            "draft_sample_method": "probabilistic", **FRONT,
            "fixed_step_costs": LOOKUP_PAYS}
    metrics = sampled_metrics(tiny["target"], spec)
    assert metrics["vllm:gammatune_ngram_draft_tokens"].value > 0


def test_cuda_hot_path_reads_once_a_step_and_hands_vllm_k_drafts(tiny, reference, tmp_path):
    """On the CUDA hot path (forced) the front reads the device once a step,
    before the plan (the verification and the sampled tokens together); the
    drafts stay on the device, padded to K, the lookup's tokens in their
    rows, and vLLM copies them to the host itself; the text is the target's.
    The engine runs in a child process that counts its reads
    (``ngram_front_hot_path``)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from test_ngram_drafter import MAX_TOKENS

    here = Path(__file__).resolve().parent
    spec = {"method": "gammatune_cost", "num_speculative_tokens": 4, **FRONT,
            "fixed_step_costs": LOOKUP_PAYS}
    out = tmp_path / "result.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(here.parent)])}
    subprocess.run([sys.executable, str(here / "ngram_front_hot_path.py"), tiny["target"],
                    tiny["draft"], json.dumps(spec), str(out), str(MAX_TOKENS)],
                   check=True, env=env, timeout=600)
    result = json.loads(out.read_text())
    assert result["hot_path"]
    assert result["tokens"] == reference
    assert result["drafting_steps"] > 0 and result["draft_forward_passes"] > 0
    assert result["ngram_accepted_tokens"] > 0, "the lookup's drafts were verified"
    assert result["max_reads_in_a_step"] <= 1, result["reads"]
    assert not result["copies"] and not result["syncs"], result
    # every step the draft model ran: a [num_reqs, K] tensor on the device
    tensors = [h for h in result["handed"] if h[0] == "tensor"]
    assert len(tensors) == result["drafting_steps"], result["handed"]
    assert all(shape[1] == k for _, k, shape in tensors), tensors
