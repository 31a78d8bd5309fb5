"""Preemption, prefix caching and chunked prefill with an adaptive drafter.

A KV cache of 14 blocks x 32 tokens for 16 requests of up to ~190 tokens makes
vLLM preempt running requests and recompute them later. Prefix caching and
chunked prefill stay on, with a batched-token budget (64) below the longest
prompts, so those prompts are prefilled in chunks and share cached blocks.
"""

from __future__ import annotations

import copy

import pytest
from llm_helpers import PROMPTS, drafter, executor, metrics_by_name, running_llm

MAX_TOKENS = 96
BUDGET = 64  # max_num_batched_tokens
SMALL_CACHE = dict(num_gpu_blocks_override=14, block_size=32, max_model_len=384,
                   max_num_batched_tokens=BUDGET, enable_prefix_caching=True,
                   enable_chunked_prefill=True)
LONG_PREFIX = "shared prefix " * 25
ALL_PROMPTS = PROMPTS + [LONG_PREFIX + p for p in PROMPTS[:6]]


def all_metrics(llm) -> dict:
    return {m.name: m for m in llm.get_metrics()}


@pytest.fixture(scope="module")
def reference(tiny):
    from vllm import SamplingParams

    with running_llm(tiny["target"], max_model_len=384) as llm:
        outs = llm.generate(ALL_PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_TOKENS),
                            use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs]


@pytest.fixture(scope="module")
def preempted_run(tiny):
    """GammaTune on the small cache, with a record of preemptions and plans."""
    from vllm import SamplingParams
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm_gammatune.policies import GammaTunePolicy

    events: list[tuple] = []
    holder: dict = {}

    def states_of(req_ids):
        records = holder["drafter"].records
        return {r: copy.deepcopy(records.policy_state(r)) for r in req_ids
                if r in records}

    original_preempt = Scheduler._preempt_request
    original_plan = GammaTunePolicy.plan_batch

    def spy_preempt(self, request, *args, **kwargs):
        events.append(("preempt", request.request_id, states_of([request.request_id])))
        return original_preempt(self, request, *args, **kwargs)

    def spy_plan(self, states, *args, **kwargs):
        # the drafter plans for the input batch's requests, in its order
        req_ids = list(holder["runner"].input_batch.req_ids)
        assert len(req_ids) == len(states)
        events.append(("plan", None, {r: copy.deepcopy(s) for r, s in zip(req_ids, states)},
                       req_ids))
        return original_plan(self, states, *args, **kwargs)

    spec = {"method": "gammatune", "model": tiny["draft"], "num_speculative_tokens": 6}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Scheduler, "_preempt_request", spy_preempt)
        mp.setattr(GammaTunePolicy, "plan_batch", spy_plan)
        with running_llm(tiny["target"], spec, **SMALL_CACHE) as llm:
            holder["drafter"] = drafter(llm)
            holder["runner"] = executor(llm).driver_worker.worker.model_runner
            config = llm.llm_engine.vllm_config
            outs = llm.generate(ALL_PROMPTS,
                                SamplingParams(temperature=0, max_tokens=MAX_TOKENS),
                                use_tqdm=False)
            metrics = all_metrics(llm)
            policy = holder["drafter"].policy
    return {"outs": outs, "events": events, "metrics": metrics, "config": config,
            "initial_state": policy.new_state()}


def test_cache_is_small_enough_to_preempt(preempted_run):
    assert preempted_run["metrics"]["vllm:num_preemptions"].value > 0
    assert any(e[0] == "preempt" for e in preempted_run["events"])


def test_greedy_equals_target_under_preemption(preempted_run, reference):
    got = [o.outputs[0].token_ids for o in preempted_run["outs"]]
    assert len(got) == len(reference)
    for i, (served, ref) in enumerate(zip(got, reference)):
        assert list(served) == list(ref), f"prompt {i}: {ALL_PROMPTS[i]!r}"


def test_prefix_caching_and_chunked_prefill_stay_on(preempted_run):
    config = preempted_run["config"]
    assert config.cache_config.enable_prefix_caching
    assert config.scheduler_config.enable_chunked_prefill
    assert config.scheduler_config.max_num_batched_tokens == BUDGET
    metrics = preempted_run["metrics"]
    assert metrics["vllm:prefix_cache_hits"].value > 0
    # some prompts need more than one step's token budget: chunked prefill
    longest = max(len(o.prompt_token_ids) for o in preempted_run["outs"])
    assert longest > BUDGET, longest
    drafted = metrics["vllm:spec_decode_num_draft_tokens"].value
    assert 0 < metrics["vllm:spec_decode_num_accepted_tokens"].value <= drafted


def test_preempted_request_resumes_with_its_learned_state(preempted_run):
    """request_records: a preempted request keeps its window (not ``gamma_init`` again)."""
    pending: dict[str, object] = {}
    checked, learned = 0, 0
    for event in preempted_run["events"]:
        if event[0] == "preempt":
            req_id, states = event[1], event[2]
            if req_id in states:  # it had drafted before being preempted
                pending[req_id] = states[req_id]
            continue
        states, req_ids = event[2], event[3]
        for req_id in req_ids:
            if req_id in pending:
                before = pending.pop(req_id)
                assert req_id in states, f"{req_id}: state dropped while preempted"
                assert states[req_id] == before, (req_id, before, states[req_id])
                checked += 1
                learned += before != preempted_run["initial_state"]
    assert checked > 0, "no preempted request with state was resumed"
    assert learned > 0, "every resumed request still had its initial state"
