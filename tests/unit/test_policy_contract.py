"""The policy contract: the planner ``DraftLengthPolicy``, the narrow
contracts of ``policies.contracts`` and which of them each policy is (the
proposer reads nothing else)."""

from __future__ import annotations

import pytest

from vllm_gammatune.methods.settings import split_speculative_config
from vllm_gammatune.methods.registry import METHODS
from vllm_gammatune.policies import (
    AdaSDPolicy,
    BatchView,
    CostAwarePolicy,
    CostObserver,
    DraftLengthPolicy,
    ExplainsSteps,
    FixedLinearCost,
    FreeDraftPlanner,
    GammaTunePolicy,
    RelaxedVerifier,
    StepObservation,
    ThresholdStop,
    TokenRule,
    TokenVerdicts,
    Verification,
)

#: every narrow contract a policy may add to planning
CONTRACTS = (ThresholdStop, TokenRule, CostObserver, FreeDraftPlanner, RelaxedVerifier,
             ExplainsSteps)

BATCH = BatchView(num_reqs=1)


class _Minimal(DraftLengthPolicy):
    """A policy with only the required methods."""

    def new_state(self):
        return "state"

    def next_num_draft_tokens(self, state, batch):
        return 2


def test_a_plain_planner_is_none_of_the_narrow_contracts():
    policy = _Minimal(4)
    assert policy.plan_batch(["state"] * 3, BatchView(3)) == [2, 2, 2]
    assert policy.observe("state", Verification("r", 0, 2, 1, num_reqs=1)) == "state"
    with pytest.raises(ValueError, match="num_accepted_tokens"):
        Verification("r", 0, 2, 3, num_reqs=1)
    # a verification with token-by-token verdicts teaches a plain planner nothing
    verdicts = TokenVerdicts(accepted_distances=(0.1,), rejected=(1.0, 0.5))
    assert policy.observe("state", Verification("r", 0, 2, 1, verdicts=verdicts)) == "state"
    # the default observe_step observes each verification of the step, in order
    states = {"a": "state", "b": "state"}
    policy.observe_step(StepObservation(1, verifications=(
        Verification("a", 0, 2, 1, num_reqs=2), Verification("b", 0, 2, 2, num_reqs=2))),
        states)
    assert states == {"a": "state", "b": "state"}
    # no stop, no per-token rule, no timing or skipping, no relaxed
    # verification, no decisions to explain
    assert not [contract for contract in CONTRACTS if isinstance(policy, contract)]
    for hook in ("stop_measure", "relaxes_verification", "observe_costs",
                 "accepts_mismatch", "last_decision"):
        assert not hasattr(policy, hook)


def test_confidence_stop_is_the_per_token_stop():
    plus = GammaTunePolicy(8, 4, 1, 0.5, 2, confidence_threshold=0.6)
    assert plus.stop_measure == "confidence"
    assert plus.stop_threshold(plus.new_state()) == 0.6
    assert GammaTunePolicy(8, 4, 1, 0.5, 2).stop_measure is None


def test_cost_aware_declares_timing_and_skipping_and_records_decisions():
    policy = CostAwarePolicy(4, target_cost=FixedLinearCost(0.1, 0.0),
                             draft_cost=FixedLinearCost(0.06, 0.0))
    # it times steps and may skip the draft model; it is not verified token
    # by token
    assert isinstance(policy, CostObserver) and not isinstance(policy, RelaxedVerifier)
    assert isinstance(policy, ExplainsSteps) and policy.last_decision is None
    state = policy.new_state()
    # past its first probe, which a new request makes at once
    state.probes.probe_interval = policy.probes.probe_interval
    plan = policy.plan_batch([state], BatchView(1, num_scheduled_tokens=1))
    decision = policy.last_decision
    assert decision.kind == "skip" and plan == [0] and decision.num_draft_tokens == 0


def _method_policy(name, **parameters):
    settings, _ = split_speculative_config({"method": name, "model": "d", **parameters},
                                           {"model", "method", "num_speculative_tokens"})
    return settings.make_policy()


@pytest.mark.parametrize("name", list(METHODS))
def test_lossless_methods_never_relax_verification(name):
    policy = _method_policy(name)
    # relaxing acceptance is what makes a method lossy, and needs the
    # per-token verification that keeps the draft distributions: only AdaSD
    # is verified token by token
    relaxes = isinstance(policy, RelaxedVerifier) and policy.relaxes_verification
    assert relaxes == (not METHODS[name].lossless)
    assert isinstance(policy, RelaxedVerifier) == isinstance(policy, AdaSDPolicy)
    if isinstance(policy, ThresholdStop):
        assert policy.stop_measure in (None, "confidence", "entropy")


def test_adasd_gen_only_is_verified_token_by_token_without_relaxing():
    policy = _method_policy("adasd", adasd_mode="generation")
    assert isinstance(policy, RelaxedVerifier) and policy.relaxes_verification is False
    assert _method_policy("adasd", adasd_mode="both").relaxes_verification is True


def test_adasd_per_token_hooks():
    policy = AdaSDPolicy(8, window=8, mode="both")
    state = policy.observe_verification(policy.new_state(), [0.1], (2.0, 0.5))
    # T_V = (0.1 + 0.5) / 2: a mismatch below it is accepted
    assert policy.verification_threshold(state) == pytest.approx(0.3)
    assert policy.accepts_mismatch(state, 0.2) and not policy.accepts_mismatch(state, 0.4)


#: the one module that may name a concrete policy: the verifier that serves
#: AdaSD's relaxed verification names the policy it serves
_SERVES_ONE_POLICY = {"verify/adasd_verifier.py": {"AdaSDPolicy"}}


@pytest.mark.parametrize("module", ["drafter", "draft_kv", "verify", "integration"])
def test_vllm_facing_modules_name_no_concrete_policy(module):
    """The worker side reaches a policy through the base class and the narrow
    contracts alone (AdaSD's verifier excepted)."""
    import pathlib

    import vllm_gammatune
    from vllm_gammatune import policies

    package = pathlib.Path(vllm_gammatune.__file__).parent
    concrete = [name for name in policies.__all__
                if name.endswith("Policy") and name != "DraftLengthPolicy"]
    assert concrete
    named = {}
    for path in sorted((package / module).glob("*.py")):
        source = path.read_text()
        allowed = _SERVES_ONE_POLICY.get(path.relative_to(package).as_posix(), set())
        found = [name for name in concrete if name in source and name not in allowed]
        if found:
            named[path.name] = found
    assert not named
