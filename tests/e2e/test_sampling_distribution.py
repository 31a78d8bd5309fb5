"""With temperature > 0 the output distribution stays the target's.

Many seeded samples of a short continuation from the target alone and from
GammaTune are compared position by position with a chi-square test of
homogeneity. The same test must tell the draft model alone apart from the
target (so it has the power to fail).
"""

from __future__ import annotations

import pytest
from llm_helpers import running_llm
from sample_homogeneity import homogeneity_pvalue

NUM_SAMPLES = 1500
NEW_TOKENS = 4
PROMPT = "The quick brown fox"
ALPHA = 0.001  # per position; 3 positions tested


def sample(target, speculative_config=None):
    from vllm import SamplingParams

    params = [
        SamplingParams(temperature=1.0, max_tokens=NEW_TOKENS, ignore_eos=True, seed=i)
        for i in range(NUM_SAMPLES)
    ]
    with running_llm(target, speculative_config) as llm:
        outs = llm.generate([PROMPT] * NUM_SAMPLES, params, use_tqdm=False)
    return [tuple(o.outputs[0].token_ids) for o in outs]


@pytest.fixture(scope="module")
def target_samples(tiny):
    return sample(tiny["target"])


@pytest.mark.parametrize(
    "method,extra",
    [
        ("gammatune", {"gamma_init": 3}),
        ("gammatune_plus", {"gamma_init": 3, "confidence_threshold": 0.5}),
        # full draft distributions in rejection sampling instead of one-hot drafts
        ("gammatune_plus", {"gamma_init": 3, "confidence_threshold": 0.5,
                            "draft_sample_method": "probabilistic"}),
        # costs under which drafting always pays: every request drafts the cap
        ("gammatune_cost", {"fixed_step_costs": {
            "target_step_s": 0.01, "target_token_s": 0.0, "draft_pass_s": 0.0,
            "draft_token_s": 0.0}}),
        # costs under which drafting pays but each draft pass must earn its
        # cost: the per-token stop ends drafts mid-way, from the draft's
        # probabilities (one-hot and full draft distributions in verification)
        ("gammatune_cost", {"fixed_step_costs": {
            "target_step_s": 0.1, "target_token_s": 0.0, "draft_pass_s": 0.005,
            "draft_token_s": 0.0}}),
        ("gammatune_cost", {"draft_sample_method": "probabilistic", "fixed_step_costs": {
            "target_step_s": 0.1, "target_token_s": 0.0, "draft_pass_s": 0.005,
            "draft_token_s": 0.0}}),
        # costs under which drafting rarely pays: steps without any draft token
        # (sampled by vLLM's plain sampler) alternate with one-token probes
        ("gammatune_cost", {"probe_interval": 2, "probe_budget": 1.0, "fixed_step_costs": {
            "target_step_s": 0.1, "target_token_s": 0.0, "draft_pass_s": 0.06,
            "draft_token_s": 0.0}}),
    ],
)
def test_sampled_distribution_matches_target(tiny, target_samples, method, extra):
    spec = {"method": method, "model": tiny["draft"], "num_speculative_tokens": 4,
            **extra}
    spec_samples = sample(tiny["target"], spec)
    for position in range(1, NEW_TOKENS):
        p = homogeneity_pvalue(target_samples, spec_samples, position)
        assert p > ALPHA, f"position {position}: p={p:.2e}"


@pytest.mark.parametrize("method,extra", [
    ("gammatune", {"gamma_init": 2}),
    # vLLM reads the draft's distributions: the padded positions get one-hot rows
    ("gammatune_plus", {"gamma_init": 2, "confidence_threshold": 0.5,
                        "draft_sample_method": "probabilistic"}),
])
def test_padded_drafts_of_the_cuda_path_keep_the_targets_distribution(
        tiny, target_samples, method, extra, monkeypatch):
    """The CUDA hot path pads each draft to K and keeps the verification of
    every drafted token (``drafter/uniform_shape.py``): the token kept past a
    draft shorter than K comes from rejecting a padded token proposed with
    certainty, not from vLLM's bonus sampler, and must be distributed as the
    target's."""
    monkeypatch.setenv("VLLM_GAMMATUNE_CUDA_HOT_PATH", "1")
    spec = {"method": method, "model": tiny["draft"], "num_speculative_tokens": 4,
            **extra}
    spec_samples = sample(tiny["target"], spec)
    for position in range(1, NEW_TOKENS):
        p = homogeneity_pvalue(target_samples, spec_samples, position)
        assert p > ALPHA, f"position {position}: p={p:.2e}"


def test_chi_square_detects_a_different_distribution(tiny, target_samples):
    draft_samples = sample(tiny["draft"])
    pvalues = [homogeneity_pvalue(target_samples, draft_samples, k) for k in range(1, NEW_TOKENS)]
    assert min(pvalues) < ALPHA, pvalues
