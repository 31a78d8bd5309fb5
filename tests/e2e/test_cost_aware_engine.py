"""gammatune_cost inside vLLM: lossless, skips the draft model, catches it up."""

from __future__ import annotations

import time

from llm_helpers import PROMPTS, drafter, metrics_by_name, record_draft_fetches, running_llm
from test_greedy_equality import MAX_TOKENS, check_spec_counters, reference  # noqa: F401

# a target step of 100 ms, a draft pass of 60 ms: drafting pays only for an
# acceptance rate of about 0.9 or more (the tiny draft is far below: it probes;
# the tests that need probes lift the probe budget, probe_budget=1.0, which in
# runs this short would otherwise hold back every probe)
RARELY_PAYS = {"target_step_s": 0.1, "target_token_s": 0.0,
               "draft_pass_s": 0.06, "draft_token_s": 0.0}
# drafting is free: every request drafts the cap
ALWAYS_PAYS = {"target_step_s": 0.01, "target_token_s": 0.0,
               "draft_pass_s": 0.0, "draft_token_s": 0.0}


def generate(llm, prompts=PROMPTS, max_tokens=MAX_TOKENS):
    from vllm import SamplingParams

    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=max_tokens))
    return [list(o.outputs[0].token_ids) for o in outs]


def counter(metrics, name) -> int:
    return int(metrics[name].value)


def test_measured_costs_greedy_equals_target(tiny, reference):  # noqa: F811
    spec = {"method": "gammatune_cost", "model": tiny["draft"], "num_speculative_tokens": 6}
    with running_llm(tiny["target"], spec) as llm:
        started = time.perf_counter()
        got = generate(llm)
        wall_us = (time.perf_counter() - started) * 1e6
        metrics = metrics_by_name(llm)
    assert got == reference
    check_spec_counters(metrics)
    # the plugin's own time is a part of the run's (it once added a token
    # position, not a start time, to the clock reading it subtracted)
    plugin_us = counter(metrics, "vllm:gammatune_plugin_time_us")
    assert 0 < plugin_us < wall_us


def record_catch_up_passes(policy) -> list[tuple[int, float]]:
    """Record every (tokens, seconds) the policy's catch-up fit is fed (each
    ``CatchUpPassTiming`` its cost observations carry)."""
    from vllm_gammatune.policies import CatchUpPassTiming

    passes = []
    original = policy.observe_costs

    def recording(timings):
        passes.extend((t.num_tokens, t.seconds) for t in timings
                      if isinstance(t, CatchUpPassTiming))
        original(timings)

    policy.observe_costs = recording
    return passes


def test_the_drafts_pass_over_a_prompt_prices_catch_ups(tiny):
    """The warm-up drafts the first prompt; that pass, prefill-like, is the
    catch-up fit's first sample, before any catch-up has run (a decode
    pass's slope would price a catch-up of thousands of tokens near free)."""
    spec = {"method": "gammatune_cost", "model": tiny["draft"], "num_speculative_tokens": 4}
    with running_llm(tiny["target"], spec) as llm:
        policy = drafter(llm).policy
        passes = record_catch_up_passes(policy)
        generate(llm, prompts=PROMPTS[:1], max_tokens=2)  # warm-up steps only
        metrics = metrics_by_name(llm)
        prompt_tokens = len(llm.get_tokenizer().encode(PROMPTS[0]))
    assert counter(metrics, "vllm:gammatune_catch_up_tokens") == 0
    assert len(passes) == 1
    num_tokens, seconds = passes[0]
    assert num_tokens >= prompt_tokens and seconds > 0
    assert policy.costs.catch_up_line(1) == (0.0, seconds / num_tokens)


def test_a_prompt_chunk_prices_catch_ups_after_a_one_token_warm_up(tiny):
    """A server's first request may be a one-token "Hello": the warm-up then
    times no prompt pass, and the next prompt chunk drafts to price
    catch-ups (before, the first probe of a served run caught up 2,113
    tokens priced at a decode pass's slope)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    spec = {"method": "gammatune_cost", "model": tiny["draft"], "num_speculative_tokens": 4}
    with running_llm(tiny["target"], spec) as llm:
        policy = drafter(llm).policy
        passes = record_catch_up_passes(policy)
        llm.generate([TokensPrompt(prompt_token_ids=[11])],
                     SamplingParams(temperature=0, max_tokens=8))
        assert policy.costs.target.ready and policy.costs.draft.ready
        assert passes == [] and policy.costs.catch_up_line(1) is None
        generate(llm, prompts=PROMPTS[:1], max_tokens=2)
        prompt_tokens = len(llm.get_tokenizer().encode(PROMPTS[0]))
    assert len(passes) == 1 and passes[0][0] >= prompt_tokens
    assert policy.costs.catch_up_line(1) is not None


def test_trace_logs_every_engine_step_decision(tiny, tmp_path, monkeypatch):
    """With ``VLLM_GAMMATUNE_TRACE`` the proposer logs each step's decision
    (built only then); the plan lines count the engine's steps."""
    import json

    from vllm_gammatune import envs
    from vllm_gammatune.telemetry import trace

    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv(envs.TRACE, str(path))
    trace._reset_for_tests()
    spec = {"method": "gammatune_cost", "model": tiny["draft"], "num_speculative_tokens": 4}
    try:
        with running_llm(tiny["target"], spec) as llm:
            generate(llm, prompts=PROMPTS[:2], max_tokens=8)
            metrics = metrics_by_name(llm)
    finally:
        trace._reset_for_tests()  # flushes
    plans = [row for row in map(json.loads, path.read_text().splitlines())
             if row.get("event") == "plan"]
    assert len(plans) == counter(metrics, "vllm:gammatune_steps")
    assert plans[0]["kind"] == "warmup" and plans[0]["num_draft_tokens"] > 0


def test_unprofitable_drafting_skips_draft_model_and_probes(tiny, reference):  # noqa: F811
    spec = {"method": "gammatune_cost", "model": tiny["draft"], "num_speculative_tokens": 6,
            "probe_interval": 3, "fixed_step_costs": RARELY_PAYS, "probe_budget": 1.0}
    with running_llm(tiny["target"], spec) as llm:
        fetched = record_draft_fetches(llm)
        decisions = record_decisions(llm)
        got = generate(llm)
        metrics = metrics_by_name(llm)
    assert got == reference
    skipped = counter(metrics, "vllm:gammatune_skipped_draft_steps")
    # the engine core fetched drafts after the steps that drafted only, never
    # after a skipped one (draft_handoff)
    steps = counter(metrics, "vllm:gammatune_steps")
    assert len(fetched) == steps - skipped
    assert all(any(answer.draft_token_ids) for answer in fetched)
    assert skipped > 0, "no step skipped the draft model"
    assert skipped == sum(d.kind == "skip" for d in decisions)
    probes = [d for d in decisions if d.kind == "probe"]
    assert probes, "no request probed"
    # a probe drafts exactly one token (a batch of new requests, whose first
    # probes come at once and are accepted together, may then lift the
    # engine's rate to where drafting pays for its own sake: "draft" steps)
    assert all(d.num_draft_tokens == d.num_probes and d.max_num_draft_tokens == 1
               for d in probes)
    assert counter(metrics, "vllm:gammatune_catch_up_tokens") > 0
    # the draft ran only on the steps that drafted, never on skipped ones: a
    # pass per probe step, at most the cap per drafted step
    passes = counter(metrics, "vllm:gammatune_draft_forward_passes")
    drafted = sum(d.kind == "draft" for d in decisions)
    assert passes <= len(probes) + spec["num_speculative_tokens"] * drafted


def record_decisions(llm) -> list:
    """Every step's ``last_decision`` of the in-process policy, as planned."""
    policy = drafter(llm).policy
    decisions, plan_batch = [], policy.plan_batch

    def recording(states, batch):
        plan = plan_batch(states, batch)
        decisions.append(policy.last_decision)
        return plan

    policy.plan_batch = recording
    return decisions


def test_probe_budget_holds_back_probes_that_cannot_pay(tiny):
    """The same costs and interval as above with the default budget (1% of a
    window of 200 steps, counted as full from the start: 0.2 s at these
    0.1 s steps). A probe step here loses about half a target step, so a
    young engine spends that allowance on a few probe steps and then probes
    about once in 50 steps: over the ~115 steps of this run, at most 4 steps
    probe and one more per 50 steps (without the budget every request probes
    every few steps: 20 probe steps on these prompts); no step that skipped
    the draft model fetches drafts."""
    spec = {"method": "gammatune_cost", "model": tiny["draft"], "num_speculative_tokens": 6,
            "probe_interval": 3, "fixed_step_costs": RARELY_PAYS}
    with running_llm(tiny["target"], spec) as llm:
        fetched = record_draft_fetches(llm)
        decisions = record_decisions(llm)
        generate(llm, max_tokens=120)
        metrics = metrics_by_name(llm)
    assert counter(metrics, "vllm:gammatune_skipped_draft_steps") > 0
    probe_steps = sum(d.kind == "probe" for d in decisions)
    assert 0 < probe_steps <= 4 + len(decisions) / 50, \
        f"{probe_steps} probe steps in {len(decisions)}: the budget did not hold them back"
    assert len(fetched) == sum(d.kind != "skip" for d in decisions), \
        "drafts fetched after a step that skipped the draft model"


def test_catch_up_restores_exact_draft_kv(tiny):
    """A draft identical to the target accepts every token only if its KV cache
    is exact: the catch-up after skipped steps must rebuild it."""
    spec = {"method": "gammatune_cost", "model": tiny["draft_identical"],
            "num_speculative_tokens": 6, "probe_interval": 2,
            "fixed_step_costs": RARELY_PAYS, "probe_budget": 1.0}
    with running_llm(tiny["target"], spec) as llm:
        generate(llm, max_tokens=60)
        metrics = metrics_by_name(llm)
    draft_tokens = counter(metrics, "vllm:spec_decode_num_draft_tokens")
    accepted = counter(metrics, "vllm:spec_decode_num_accepted_tokens")
    assert counter(metrics, "vllm:gammatune_catch_up_tokens") > 0
    assert draft_tokens > 0 and accepted == draft_tokens


def test_prefix_cached_blocks_the_draft_skipped_are_caught_up(tiny):
    """A request that reuses prompt blocks from the prefix cache, prefilled
    while the draft model skipped, catches the draft up over them before it
    drafts: a draft identical to the target then accepts every token (drafting
    against the blocks' stale draft KV, it would accept none)."""
    from vllm import SamplingParams

    prompt = "hello world " * 80  # three KV blocks of 128 and a part
    spec = {"method": "gammatune_cost", "model": tiny["draft_identical"],
            "num_speculative_tokens": 6, "probe_interval": 2,
            "fixed_step_costs": RARELY_PAYS, "probe_budget": 1e-9}

    def run(max_tokens):
        llm.generate([prompt], SamplingParams(temperature=0, max_tokens=max_tokens,
                                              ignore_eos=True))
        metrics = metrics_by_name(llm)
        hits = sum(m.value for m in llm.get_metrics() if m.name == "vllm:prefix_cache_hits")
        return [counter(metrics, name) for name in (
            "vllm:gammatune_draft_forward_passes", "vllm:spec_decode_num_draft_tokens",
            "vllm:spec_decode_num_accepted_tokens", "vllm:gammatune_catch_up_tokens")] + [hits]

    with running_llm(tiny["target"], spec, enable_prefix_caching=True) as llm:
        # a budget of almost nothing holds back every probe: the draft never runs
        first = run(8)
        assert first[0] == 0
        drafter(llm).policy.probes.budget = 1.0  # now it probes
        second = run(40)
    passes, draft_tokens, accepted, catch_up, hits = (b - a for a, b in zip(first, second))
    assert hits > 0, "the second request did not reuse the first one's blocks"
    assert passes > 0 and draft_tokens > 0 and accepted == draft_tokens
    # the catch-up covered the cached prefix, not only the request's own steps
    assert catch_up >= hits


def test_always_paying_drafts_the_cap_without_skips(tiny, reference):  # noqa: F811
    """Only the first step skips: it holds every prompt (an in-process engine
    gets them all before its first step), and a new engine's prompt chunks
    wait until decode steps after them have drafted. Its prompts are caught
    up once; every later step drafts, mostly the cap."""
    from vllm import SamplingParams

    spec = {"method": "gammatune_cost", "model": tiny["draft_identical"],
            "num_speculative_tokens": 4, "fixed_step_costs": ALWAYS_PAYS}
    with running_llm(tiny["target"], spec) as llm:
        outputs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
        metrics = metrics_by_name(llm)
    assert [list(o.outputs[0].token_ids) for o in outputs] == reference
    assert counter(metrics, "vllm:gammatune_skipped_draft_steps") == 1
    assert counter(metrics, "vllm:gammatune_catch_up_tokens") == sum(
        len(o.prompt_token_ids) for o in outputs)
    hist = metrics["vllm:gammatune_draft_length"]
    counts = [hist.buckets[b] for b in sorted(hist.buckets, key=lambda b: float(b))]
    at_cap = counts[4] - counts[3]
    assert at_cap > 0.5 * hist.count, "free drafting should mostly use the cap"


def _token_logprobs(outputs):
    """Per request: [(token_id, {top token: logprob})] for every generated token."""
    return [
        [(token, {t: lp.logprob for t, lp in top.items()})
         for token, top in zip(o.outputs[0].token_ids, o.outputs[0].logprobs)]
        for o in outputs
    ]


def test_logprobs_match_target_on_skipped_and_probe_steps(tiny):
    """Steps without any draft token are sampled by vLLM's plain sampler, probe
    steps by its rejection sampler: both must report the target's tokens and
    top logprobs."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=16, logprobs=2)
    prompts = PROMPTS[:4]
    with running_llm(tiny["target"]) as llm:
        expected = _token_logprobs(llm.generate(prompts, params))
    spec = {"method": "gammatune_cost", "model": tiny["draft"], "num_speculative_tokens": 4,
            "probe_interval": 2, "fixed_step_costs": RARELY_PAYS, "probe_budget": 1.0}
    with running_llm(tiny["target"], spec) as llm:
        got = _token_logprobs(llm.generate(prompts, params))
        metrics = metrics_by_name(llm)
    assert counter(metrics, "vllm:gammatune_skipped_draft_steps") > 0
    assert counter(metrics, "vllm:spec_decode_num_drafts") > 0
    for want_request, got_request in zip(expected, got):
        assert [t for t, _ in got_request] == [t for t, _ in want_request]
        for (_, want), (_, have) in zip(want_request, got_request):
            assert set(have) == set(want)
            for token, logprob in want.items():
                assert abs(have[token] - logprob) < 1e-3, (token, have[token], logprob)


# drafting pays, a draft pass is cheap but not free: the per-token stop ends
# drafts where the survival of the next token falls below what a pass costs
CHEAP_PASSES = {"target_step_s": 0.1, "target_token_s": 0.0,
                "draft_pass_s": 0.005, "draft_token_s": 0.0}


def test_per_token_stop_cuts_drafts_losslessly_and_traces_its_estimates(
        tiny, reference, tmp_path, monkeypatch):  # noqa: F811
    """The rule ends drafts before the cap (counted), the output is the
    target's, and the trace gives each verified token's draft probability
    and the rule's estimate of its acceptance."""
    import json

    from vllm_gammatune import envs
    from vllm_gammatune.telemetry import trace

    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv(envs.TRACE, str(path))
    trace._reset_for_tests()
    spec = {"method": "gammatune_cost", "model": tiny["draft"], "num_speculative_tokens": 6,
            "fixed_step_costs": CHEAP_PASSES}
    try:
        with running_llm(tiny["target"], spec) as llm:
            got = generate(llm)
            metrics = metrics_by_name(llm)
    finally:
        trace._reset_for_tests()  # flushes
    assert got == reference
    stopped = counter(metrics, "vllm:gammatune_stopped_draft_tokens")
    planned = counter(metrics, "vllm:gammatune_planned_draft_tokens")
    drafted = int(metrics["vllm:gammatune_draft_length"].sum)
    assert 0 < stopped and drafted + stopped <= planned
    verified = [row for row in map(json.loads, path.read_text().splitlines())
                if "event" not in row]
    assert verified
    for row in verified:
        assert len(row["token_probs"]) == row["num_draft_tokens"]
        assert len(row["predicted_acceptance"]) == row["num_draft_tokens"]
        assert all(0.0 <= q <= 1.0 for q in row["token_probs"])
    lengths = {row["num_draft_tokens"] for row in verified}
    assert len(lengths) > 1, "the rule should vary the draft length"


def test_without_the_per_token_stop_nothing_is_stopped(tiny, reference):  # noqa: F811
    spec = {"method": "gammatune_cost", "model": tiny["draft"], "num_speculative_tokens": 6,
            "fixed_step_costs": CHEAP_PASSES, "token_stop": False}
    with running_llm(tiny["target"], spec) as llm:
        got = generate(llm)
        metrics = metrics_by_name(llm)
    assert got == reference
    assert counter(metrics, "vllm:gammatune_stopped_draft_tokens") == 0
