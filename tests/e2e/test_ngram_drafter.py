"""The n-gram drafter (``"drafter": "ngram"``): lossless, driven per request.

Greedy text equals the target alone for every method that can drive it, on
prompts whose text repeats (so the lookup finds matches and drafts are
verified); with temperature > 0 the distribution stays the target's; the
plugin's drafter is the one built (the worker confirms it, or the engine
does not start), and it runs no draft forward pass.

The n-gram engines run in their own engine process. vLLM's n-gram lookup
imports numba, whose llvmlite objects break the scan of every loaded module
that vLLM's CPU platform makes when a later worker starts in the same process
(``vllm.triton_utils.dispatcher``: ``vars(value).get`` on an object whose
``__dict__`` is not a dict); an in-process n-gram engine would make every
later engine of this test session fail to start. Each worker process is new,
so served and multiprocess engines are unaffected.
"""

from __future__ import annotations

import sys

import pytest
from llm_helpers import PROMPTS, metrics_by_name, running_llm
from sample_homogeneity import homogeneity_pvalue
from test_greedy_equality import check_spec_counters


@pytest.fixture(autouse=True)
def engine_process(monkeypatch):
    """An engine process for each n-gram engine, and proof that the test
    process itself never loaded numba."""
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    yield
    assert "llvmlite.binding.ffi" not in sys.modules, "numba loaded in the test process"

MAX_TOKENS = 40
#: short n-grams, so the tiny models' text finds matches
NGRAM = {"drafter": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3}
#: costs under which verifying a draft token always pays
DRAFTING_PAYS = {"target_step_s": 0.01, "target_token_s": 0.0, "draft_pass_s": 0.0,
                 "draft_token_s": 0.0}

METHODS = {
    "gammatune": {"gamma_init": 2},
    "fixed_draft": {"gamma_init": 3},
    "hf_heuristic": {"gamma_init": 1},
    "gammatune_cost": {"fixed_step_costs": DRAFTING_PAYS},
    "gammatune_cost_measured": {},
}


@pytest.fixture(scope="module")
def reference(tiny):
    from vllm import SamplingParams

    with running_llm(tiny["target"]) as llm:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
    return [list(o.outputs[0].token_ids) for o in outs]


def greedy_metrics(target: str, spec: dict, reference, drafter: str) -> dict:
    """The engine's metrics after greedy generation whose text must equal
    the target alone (``reference``), from a worker that confirmed the
    plugin's ``drafter`` class before its weights loaded."""
    from vllm import SamplingParams

    with running_llm(target, spec) as llm:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
        metrics = metrics_by_name(llm)
    info = metrics["vllm:gammatune_info"]
    assert info.value == 1 and info.labels["drafter"] == drafter
    got = [list(o.outputs[0].token_ids) for o in outs]
    for i, (want, have) in enumerate(zip(reference, got)):
        assert have == want, f"prompt {i} differs from the target alone"
    return metrics


@pytest.mark.parametrize("name", list(METHODS))
def test_greedy_output_equals_target_alone(tiny, reference, name):
    method = name.removesuffix("_measured")
    spec = {"method": method, "num_speculative_tokens": 6, **NGRAM, **METHODS[name]}
    metrics = greedy_metrics(tiny["target"], spec, reference, "AdaptiveNgramProposer")
    drafts, draft_tokens, accepted = check_spec_counters(metrics)
    if name != "gammatune_cost_measured":  # measured costs may find no draft pays
        assert accepted > 0, "repeating text should give accepted n-gram drafts"
    # the plugin's counters: what was verified, and no draft model ran
    assert metrics["vllm:gammatune_draft_forward_passes"].value == 0
    hist = metrics["vllm:gammatune_draft_length"]
    counts = [hist.buckets[b] for b in sorted(hist.buckets, key=float)]
    used = {i for i, (prev, cur) in enumerate(zip([0] + counts, counts)) if cur > prev}
    assert used and max(used) <= 6
    if method == "fixed_draft":
        # a match shorter than the length is verified whole, never more
        assert max(used) <= 3
    elif method == "gammatune":
        assert len(used) > 1, f"gammatune should vary the verified length: {used}"


PROMPT = "the cat sat on the mat. the cat sat on the mat. the cat sat on the"
NUM_SAMPLES = 1000
NEW_TOKENS = 4
ALPHA = 0.001  # per position; 3 positions tested


def sample(target, speculative_config=None):
    from vllm import SamplingParams

    params = [SamplingParams(temperature=1.0, max_tokens=NEW_TOKENS, ignore_eos=True, seed=i)
              for i in range(NUM_SAMPLES)]
    with running_llm(target, speculative_config) as llm:
        outs = llm.generate([PROMPT] * NUM_SAMPLES, params, use_tqdm=False)
        metrics = metrics_by_name(llm) if speculative_config else {}
    return [tuple(o.outputs[0].token_ids) for o in outs], metrics


def sampled_metrics(target: str, spec: dict) -> dict:
    """The engine's metrics after sampling whose distribution must be the
    target's alone, position by position after the first."""
    target_samples, _ = sample(target)
    spec_samples, metrics = sample(target, spec)
    for position in range(1, NEW_TOKENS):
        p = homogeneity_pvalue(target_samples, spec_samples, position)
        assert p > ALPHA, f"position {position}: p={p:.2e}"
    return metrics


def test_sampled_distribution_matches_target(tiny):
    """N-gram drafts are verified as deterministic proposals by vLLM's
    rejection sampler (no draft distribution): lossless at temperature 1."""
    spec = {"method": "gammatune_cost", "num_speculative_tokens": 4, **NGRAM,
            "fixed_step_costs": DRAFTING_PAYS}
    metrics = sampled_metrics(tiny["target"], spec)
    assert metrics["vllm:spec_decode_num_draft_tokens"].value > 0
