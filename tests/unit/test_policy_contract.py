"""The policy contract: the optional hooks of ``DraftLengthPolicy`` and what
each policy declares through them (the proposer reads nothing else)."""

from __future__ import annotations

import pytest

from vllm_gammatune.methods.settings import split_speculative_config
from vllm_gammatune.methods.registry import METHODS
from vllm_gammatune.policies import (
    AdaSDPolicy,
    BatchView,
    CostAwarePolicy,
    DraftLengthPolicy,
    FixedLinearCost,
    GammaTunePolicy,
)

BATCH = BatchView(batch_size=1)


class _Minimal(DraftLengthPolicy):
    """A policy with only the required methods."""

    def new_state(self):
        return "state"

    def next_num_draft_tokens(self, state, batch):
        return 2


def test_hooks_default_to_off():
    policy = _Minimal(4)
    assert policy.plan_batch(["state"] * 3, BatchView(3)) == [2, 2, 2]
    assert policy.observe("state", 2, 1, BATCH) == "state"
    with pytest.raises(ValueError, match="num_accepted_tokens"):
        policy.observe("state", 2, 3, BATCH)
    assert policy.stop_measure is None
    assert not (policy.learns_per_token or policy.relaxes_verification
                or policy.times_steps or policy.skips_drafts)
    assert policy.accepts_mismatch("state", 0.0) is False
    assert policy.verification_threshold("state") == 0.0
    assert policy.observe_verification("state", [0.1], (1.0, 0.5)) == "state"
    for hook in (policy.observe_draft_pass, policy.observe_target_step):
        assert hook(3, 0.01, 1) is None
    assert policy.observe_catch_up_pass(100, 0.5) is None
    assert policy.observe_cycle_wall_time(0.1) is None
    assert policy.last_decision is None and policy.cycle_check is None


def test_confidence_stop_is_the_per_token_stop():
    plus = GammaTunePolicy(8, 4, 1, 0.5, 2, confidence_threshold=0.6)
    assert plus.stop_measure == "confidence"
    assert plus.stop_threshold(plus.new_state()) == 0.6
    assert GammaTunePolicy(8, 4, 1, 0.5, 2).stop_measure is None


def test_cost_aware_declares_timing_and_skipping_and_records_decisions():
    policy = CostAwarePolicy(4, target_cost=FixedLinearCost(0.1, 0.0),
                             draft_cost=FixedLinearCost(0.06, 0.0), check_cycles=False)
    assert policy.times_steps and policy.skips_drafts and not policy.learns_per_token
    assert policy.last_decision is None
    state = policy.new_state()
    # past its first probe, which a new request makes at once
    state.probe_interval = policy.probes.probe_interval
    plan = policy.plan_batch([state], BatchView(1, num_scheduled_tokens=1))
    decision = policy.last_decision
    assert decision.kind == "skip" and plan == [0] and decision.num_draft_tokens == 0


@pytest.mark.parametrize("name", list(METHODS))
def test_lossless_methods_never_relax_verification(name):
    settings, _ = split_speculative_config({"method": name, "model": "d"},
                                           {"model", "method", "num_speculative_tokens"})
    policy = settings.make_policy()
    # relaxing acceptance is what makes a method lossy, and needs the
    # per-token verification that keeps the draft distributions
    assert policy.relaxes_verification == (not METHODS[name].lossless)
    if policy.relaxes_verification:
        assert policy.learns_per_token
    assert policy.stop_measure in (None, "confidence", "entropy")


def test_adasd_per_token_hooks():
    policy = AdaSDPolicy(8, window=8, mode="both")
    state = policy.observe_verification(policy.new_state(), [0.1], (2.0, 0.5))
    # T_V = (0.1 + 0.5) / 2: a mismatch below it is accepted
    assert policy.verification_threshold(state) == pytest.approx(0.3)
    assert policy.accepts_mismatch(state, 0.2) and not policy.accepts_mismatch(state, 0.4)


@pytest.mark.parametrize("module", ["drafter", "draft_kv", "verify", "integration"])
def test_vllm_facing_modules_name_no_concrete_policy(module):
    """The worker side reaches a policy through the base class alone."""
    import pathlib

    import vllm_gammatune
    from vllm_gammatune import policies

    folder = pathlib.Path(vllm_gammatune.__file__).parent / module
    source = "".join(path.read_text() for path in sorted(folder.glob("*.py")))
    concrete = [name for name in policies.__all__
                if name.endswith("Policy") and name != "DraftLengthPolicy"]
    assert concrete and not [name for name in concrete if name in source]
