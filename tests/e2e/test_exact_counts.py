"""Exact counts from a real engine: a request cut by ``max_tokens`` while
drafting long.

With a draft identical to the target every greedy draft token is accepted,
so at K=6 a request of 10 tokens runs three target passes: its prompt (1
token), a verification of 6 accepted drafts (7 tokens) and one more whose 6
accepted drafts are cut to 2 tokens by ``max_tokens``. vLLM counts 12
accepted tokens; the request generated 7 drafted ones. The harness's counts
(``gammatune_tools.bench.counters``) must say 3 passes, 7 tokens accepted
within ``max_tokens``, and draft forwards in one unit for vLLM's drafter and
the plugin's.
"""

from __future__ import annotations

import pytest
from llm_helpers import running_llm

K, MAX_TOKENS = 6, 10
PROMPT = "def add(a, b):"


def counted(tiny, spec: dict) -> dict:
    from vllm import SamplingParams

    from gammatune_tools.bench.counters import EngineCounts

    with running_llm(tiny["target"], spec) as llm:
        counts = EngineCounts(llm)
        out = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=MAX_TOKENS,
                                                    ignore_eos=True))
        values = counts.read()
    return {**values, "output_tokens": len(out[0].outputs[0].token_ids)}


@pytest.mark.parametrize("method", ["vllm_draft_model", "fixed_draft"])
def test_a_request_cut_by_max_tokens_counts_only_what_it_generated(tiny, method):
    from gammatune_tools.bench.counters import draft_forwards, exact_counts

    spec = {"method": "draft_model" if method == "vllm_draft_model" else method,
            "model": tiny["draft_identical"], "num_speculative_tokens": K}
    if method == "fixed_draft":
        spec["gamma_init"] = K
    values = counted(tiny, spec)
    assert values["output_tokens"] == MAX_TOKENS
    assert values["target_passes"] == 3 and values["engine_steps"] == 3
    assert values["accepted"] == 2 * K  # vLLM's count, past max_tokens
    forwards = draft_forwards(method, K, values["draft_forward_passes"],
                              values["engine_steps"])
    exact = exact_counts(values["output_tokens"], values["target_passes"],
                         values["drafts"], forwards)
    assert exact["target_passes_per_token"] == pytest.approx(3 / MAX_TOKENS)
    assert exact["accepted_length"] == pytest.approx(1 + 7 / 2)
    # vLLM's drafter: K forwards in each of the 3 steps; the plugin counts its
    # own, which the same rule must match for a fixed K
    assert exact["draft_forwards_per_token"] == pytest.approx(K * 3 / MAX_TOKENS)
