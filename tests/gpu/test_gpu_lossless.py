"""CUDA only: the lossless methods keep the target's output, at vLLM's own tolerance.

Greedy: in half precision a verification pass (1 + K tokens through the
target) rounds differently from one-token decoding, so a near-tie can go the
other way and a request's text changes from there on, on correct code. vLLM's
own end-to-end spec-decode tests therefore accept a share of prompts whose
output matches the target's exactly (``tests/v1/e2e/test_spec_decode.py``:
``matches >= int(0.66 * len(ref_outputs))`` for n-gram, suffix and
speculators models, ``matches > int(0.6 * ...)`` for EAGLE); this tier
holds the plugin to the stricter 66%, and checks that drafting happened.

Sampled: many seeded samples of a short continuation, target alone against
each method, compared position by position (chi-square test of homogeneity,
as the CPU tier does in ``tests/e2e/test_sampling_distribution.py``); the
same test must tell the draft alone from the target, so it can fail.
"""

from __future__ import annotations

import pytest
from gpu_engines import (DRAFTING_COSTS, PROMPTS, engine_metrics, greedy_tokens, needs_cuda,
                         plugin_spec, running_engine)
from sample_homogeneity import differing_positions

from vllm_gammatune.methods import LOSSY_METHODS, PLUGIN_METHODS

pytestmark = needs_cuda

#: vLLM's share of exactly matching prompts in its spec-decode correctness tests
MATCH_SHARE = 0.66

NUM_SAMPLES = 1500
NEW_TOKENS = 4
POSITIONS = range(1, NEW_TOKENS)
ALPHA = 0.001  # per position; 3 positions tested


@pytest.fixture(scope="module")
def target_greedy(tiny_models):
    with running_engine(tiny_models["target"]) as llm:
        return greedy_tokens(llm)


@pytest.mark.parametrize("method,extra", [
    *[(m, DRAFTING_COSTS if m == "gammatune_cost" else {})
      for m in PLUGIN_METHODS if m not in LOSSY_METHODS],
    # the n-gram lookup ahead of the draft model (the host path on CUDA)
    ("gammatune_cost_ngram_model", DRAFTING_COSTS)])
def test_greedy_output_matches_the_target_at_vllms_tolerance(
        tiny_models, target_greedy, gpu_measurements, method, extra):
    spec = plugin_spec(method, tiny_models["draft"], **extra)
    with running_engine(tiny_models["target"], spec) as llm:
        tokens = greedy_tokens(llm)
        drafted = engine_metrics(llm)["vllm:spec_decode_num_draft_tokens"].value
    matches = sum(ours == theirs for ours, theirs in zip(tokens, target_greedy))
    gpu_measurements[f"greedy_exact_matches[{method}{'+costs' if extra else ''}]"] = (
        f"{matches}/{len(PROMPTS)}")
    assert drafted > 0
    assert matches >= int(MATCH_SHARE * len(PROMPTS)), (matches, len(PROMPTS))


def _samples(target, speculative_config=None) -> list[tuple]:
    from vllm import SamplingParams

    params = [SamplingParams(temperature=1.0, max_tokens=NEW_TOKENS, ignore_eos=True, seed=i)
              for i in range(NUM_SAMPLES)]
    with running_engine(target, speculative_config, max_num_seqs=64) as llm:
        outputs = llm.generate([PROMPTS[-1]] * NUM_SAMPLES, params, use_tqdm=False)
    return [tuple(output.outputs[0].token_ids) for output in outputs]


@pytest.fixture(scope="module")
def target_samples(tiny_models):
    return _samples(tiny_models["target"])


@pytest.mark.parametrize("method,extra", [
    ("gammatune", {}),
    ("gammatune_plus", {"confidence_threshold": 0.5, "draft_sample_method": "probabilistic"}),
    ("gammatune_cost", DRAFTING_COSTS),
    # one-hot rows for the lookup's tokens beside the draft model's distributions
    ("gammatune_cost_ngram_model", {**DRAFTING_COSTS, "draft_sample_method": "probabilistic"}),
])
def test_sampled_distribution_matches_the_target(tiny_models, target_samples, method, extra):
    samples = _samples(tiny_models["target"], plugin_spec(method, tiny_models["draft"], **extra))
    assert differing_positions(target_samples, samples, POSITIONS, ALPHA) == {}


def test_the_sampled_test_tells_the_draft_from_the_target(tiny_models, target_samples):
    assert differing_positions(target_samples, _samples(tiny_models["draft"]), POSITIONS, ALPHA)
