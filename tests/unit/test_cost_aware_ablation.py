"""Parts of ``gammatune_cost`` switched off for measurement (``ablate``):
each changes what it says it changes, and a bad part is refused at start."""

from __future__ import annotations

import pytest
from policy_simulation import measured_cpu_policy, policy, trained_states

from vllm_gammatune.methods import GammaTuneConfigError, split_speculative_config
from vllm_gammatune.policies import BatchView, Verification
from vllm_gammatune.policies.cost_aware.ablation import ABLATABLE_PARTS
from vllm_gammatune.policies.cost_aware.token_acceptance import logit

VLLM_KEYS = frozenset({"model", "num_speculative_tokens"})


def test_unknown_parts_are_refused_naming_the_field_the_value_and_the_parts():
    with pytest.raises(GammaTuneConfigError) as error:
        split_speculative_config({"method": "gammatune_cost", "model": "d",
                                  "ablate": ["probes", "nope"]}, VLLM_KEYS)
    message = str(error.value)
    assert "speculative_config['ablate']=['probes', 'nope']" in message
    assert all(part in message for part in ABLATABLE_PARTS)
    with pytest.raises(GammaTuneConfigError, match="must be a list"):
        split_speculative_config({"method": "gammatune_cost", "model": "d",
                                  "ablate": "probes"}, VLLM_KEYS)
    with pytest.raises(GammaTuneConfigError, match="not a parameter of method 'gammatune'"):
        split_speculative_config({"method": "gammatune", "model": "d",
                                  "ablate": ["probes"]}, VLLM_KEYS)
    with pytest.raises(ValueError, match="unknown part"):
        policy(ablate=["nope"])
    settings, _ = split_speculative_config(
        {"method": "gammatune_cost", "model": "d", "ablate": ["shrinkage", "probes",
                                                              "probes"]}, VLLM_KEYS)
    assert settings.parameters["ablate"] == ["probes", "shrinkage"]
    assert settings.make_policy().ablated == {"probes", "shrinkage"}


def test_a_removed_part_is_refused_naming_the_parts_there_are():
    # the clock check did not pay for itself (docs/cost-aware.md) and is gone
    with pytest.raises(GammaTuneConfigError) as error:
        split_speculative_config({"method": "gammatune_cost", "model": "d",
                                  "ablate": ["clock_check"]}, VLLM_KEYS)
    assert "'clock_check'" in str(error.value) and "shrinkage" in str(error.value)
    with pytest.raises(ValueError, match="unknown part.s. clock_check; allowed: probes"):
        policy(ablate=["clock_check"])


def test_without_shrinkage_a_request_has_its_own_rate_or_the_engines():
    shrunk, own = policy(), policy(ablate=["shrinkage"])
    for p in (shrunk, own):
        for _ in range(30):  # the engine's requests accept well
            p.observe(p.new_state(), Verification("a", 0, 4, 4, num_reqs=1))
    engine_rate = own.acceptance.rate(own.new_state().acceptance)
    assert engine_rate > 0.9  # a new request starts at the engine's rate
    rate = {}
    for name, p in (("shrunk", shrunk), ("own", own)):
        state = p.new_state()
        p.observe(state, Verification("b", 0, 4, 1, num_reqs=1))
        rate[name] = p.acceptance.rate(state.acceptance)
    assert rate["own"] == pytest.approx(0.5)  # 1 accepted, 1 rejection: its own
    assert rate["shrunk"] > 0.7  # pulled toward the engine's


def test_without_the_token_model_a_tokens_acceptance_is_the_drafts_probability():
    for ablate, moves in (([], True), (["token_model"], False)):
        p = policy(ablate=ablate)
        model = p.token_stop.model
        for _ in range(50):  # confident tokens that verification rejects
            model.learn([logit(0.9)] * 4, 0, 0.0)
        estimate = model.predict(logit(0.9), 1)
        assert (estimate < 0.8) is moves
        if not moves:
            assert estimate == pytest.approx(0.9)


def test_without_probes_a_request_at_length_zero_waits_for_a_plan():
    for ablate, probes in (([], True), (["probes"], False)):
        p = policy(probe_interval=2, probe_budget=1.0, ablate=ablate)
        state = trained_states(p, 1, drafted=4, accepted=0)[0]
        plans = [p.plan_batch([state], BatchView(1, 1))[0] for _ in range(12)]
        assert (max(plans) > 0) is probes


def test_without_the_prompt_chunk_rule_a_chunk_drafts_as_a_decode_step_would():
    # no decode step has drafted after a prompt chunk yet: the rule waits
    for ablate, drafts in (([], False), (["prompt_chunk_rule"], True)):
        p = measured_cpu_policy(ablate=ablate)
        new = trained_states(p, 1, drafted=4, accepted=4)
        assert (max(p.plan_batch(new, BatchView(1, 2, has_prefill=True))) > 0) is drafts


def test_without_catch_up_pricing_plans_charge_nothing_and_nothing_is_priced():
    # a fresh engine's prompt chunk drafts to price the catch-up pass
    priced, unpriced = (measured_cpu_policy(prompt_pass=False, ablate=ablate)
                        for ablate in ([], ["catch_up_pricing"]))
    chunk = BatchView(1, 300, has_prefill=True)
    priced.plan_batch(trained_states(priced, 1, drafted=4, accepted=4), chunk)
    assert priced.last_decision.kind == "price"
    unpriced.plan_batch(trained_states(unpriced, 1, drafted=4, accepted=4), chunk)
    assert unpriced.last_decision.kind != "price"
    # a request with a long prompt to catch up and few tokens left: the
    # catch-up does not pay, unless nothing charges it
    p, free = (measured_cpu_policy(ablate=ablate) for ablate in ([], ["catch_up_pricing"]))
    caught_up = BatchView(1, 1, catch_up_tokens=(3000,), remaining_tokens=(4,))
    assert p.plan_batch(trained_states(p, 1, drafted=4, accepted=3), caught_up) == [0]
    assert max(free.plan_batch(trained_states(free, 1, drafted=4, accepted=3),
                               caught_up)) > 0
