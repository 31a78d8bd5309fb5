"""Policies against values worked out by hand from GammaTune's Algorithm 1."""

import pytest

from vllm_gammatune.policies import (
    AssistantThresholdPolicy,
    BatchView,
    FixedDraftPolicy,
    GammaTunePolicy,
    HFHeuristicPolicy,
    Verification,
)

BATCH = BatchView(num_reqs=1)


def run(policy, observations):
    """Feed (drafted, accepted) pairs; return the planned length before each."""
    state = policy.new_state()
    planned = [policy.next_num_draft_tokens(state, BATCH)]
    for step, (drafted, accepted) in enumerate(observations):
        verification = Verification("r", step, drafted, accepted, num_reqs=BATCH.num_reqs)
        state = policy.observe(state, verification)
        planned.append(policy.next_num_draft_tokens(state, BATCH))
    return planned, state


def test_gammatune_worked_example_eta_half_delta_two():
    # gamma_init=4, eta=0.5, delta=2, gamma_min=1, gamma_max=16:
    # 4/4 accepted -> A=4+2=6 -> bar=0.5*4+0.5*6=5.0 -> gamma=5   (lines 1-5)
    # 1/5          -> bar=0.5*5+0.5*1=3.0               -> gamma=3
    # 0/3          -> bar=1.5                           -> gamma=2
    # 0/2          -> bar=0.75 -> clamp to gamma_min=1  -> gamma=1
    # 1/1 accepted -> A=1+2=3 -> bar=0.5*1+0.5*3=2.0    -> gamma=2
    policy = GammaTunePolicy(16, gamma_init=4, gamma_min=1, eta=0.5, delta=2)
    planned, state = run(policy, [(4, 4), (5, 1), (3, 0), (2, 0), (1, 1)])
    assert planned == [4, 5, 3, 2, 1, 2]
    assert state.gamma_bar == pytest.approx(2.0)


def test_gammatune_ceil_of_fractional_average():
    # eta=0.3, delta=1: 2/4 -> bar=0.7*4+0.3*2=3.4 -> ceil 4;
    # 4/4 -> A=5 -> bar=0.7*3.4+0.3*5=3.88 -> 4; 0/4 -> bar=2.716 -> 3
    policy = GammaTunePolicy(16, gamma_init=4, gamma_min=1, eta=0.3, delta=1)
    planned, state = run(policy, [(4, 2), (4, 4), (4, 0)])
    assert planned == [4, 4, 4, 3]
    assert state.gamma_bar == pytest.approx(2.716)


def test_gammatune_clamps_to_gamma_max_and_gamma_min():
    policy = GammaTunePolicy(6, gamma_init=6, gamma_min=2, eta=0.5, delta=2)
    planned, state = run(policy, [(6, 6), (6, 6)])
    assert planned == [6, 6, 6]  # 0.5*6+0.5*8=7 -> clamp 6
    assert state.gamma_bar == 6.0
    planned, state = run(policy, [(6, 0), (3, 0), (2, 0), (2, 0)])
    assert planned[-1] == 2 and state.gamma_bar == 2.0


def test_gammatune_all_accepted_compares_with_tokens_actually_drafted():
    # A confidence stop cut a planned 5 to 2 drafted; both accepted counts as
    # "all accepted": A=2+2=4 -> bar=0.5*5+0.5*4=4.5 -> 5.
    policy = GammaTunePolicy(16, gamma_init=5, gamma_min=1, eta=0.5, delta=2)
    planned, state = run(policy, [(2, 2)])
    assert planned == [5, 5] and state.gamma_bar == pytest.approx(4.5)
    # one of two rejected: no expansion -> bar=0.5*5+0.5*1=3.0 -> 3
    planned, _ = run(policy, [(2, 1)])
    assert planned == [5, 3]


def test_gammatune_eta_one_follows_last_observation():
    policy = GammaTunePolicy(16, gamma_init=8, gamma_min=1, eta=1.0, delta=0)
    planned, _ = run(policy, [(8, 3), (3, 3), (3, 1)])
    assert planned == [8, 3, 3, 1]


def test_gammatune_plus_carries_threshold():
    policy = GammaTunePolicy(16, 4, 1, 0.5, 2, confidence_threshold=0.3)
    assert policy.confidence_threshold == 0.3
    assert GammaTunePolicy(16, 4, 1, 0.5, 2).confidence_threshold is None


def test_hf_heuristic_plus_two_minus_one_floor_one_cap():
    policy = HFHeuristicPolicy(8, num_draft_tokens=4)
    planned, _ = run(policy, [(4, 4), (6, 6), (8, 8), (8, 7), (7, 0)])
    assert planned == [4, 6, 8, 8, 7, 6]
    planned, _ = run(HFHeuristicPolicy(8, 1), [(1, 0), (1, 0)])
    assert planned == [1, 1, 1]


def test_fixed_and_assistant_threshold_keep_length():
    planned, _ = run(FixedDraftPolicy(8, 3), [(3, 0), (3, 3), (3, 1)])
    assert planned == [3, 3, 3, 3]
    policy = AssistantThresholdPolicy(8, 5, confidence_threshold=0.4)
    planned, _ = run(policy, [(2, 2), (5, 0)])
    assert planned == [5, 5, 5] and policy.confidence_threshold == 0.4
    assert FixedDraftPolicy(4, 10).num_draft_tokens == 4  # clamped to the cap


@pytest.mark.parametrize("drafted,accepted", [(3, 4), (2, -1)])
def test_observation_out_of_range_is_refused(drafted, accepted):
    # refused where the verification is built, before any policy sees it
    with pytest.raises(ValueError, match="num_accepted_tokens"):
        Verification("r", 0, drafted, accepted, num_reqs=BATCH.num_reqs)


def test_policies_do_not_import_vllm():
    import subprocess
    import sys

    code = (
        "import sys, vllm_gammatune.policies, vllm_gammatune.drafter.request_records, "
        "vllm_gammatune.methods.settings, vllm_gammatune.methods.registry; "
        "assert not any(m in ('vllm', 'torch') or m.startswith(('vllm.', 'torch.')) "
        "for m in sys.modules), "
        "sorted(m for m in sys.modules if m.startswith(('vllm', 'torch')))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_gammatune_refuses_a_window_outside_its_clamp():
    """The plan reads each request's gamma as is: gamma_init and gamma_min
    must lie inside [1, gamma_max] for line 4's clamp to hold from the start."""
    for gamma_init, gamma_min in ((9, 1), (2, 3), (4, 0)):
        with pytest.raises(ValueError, match="gamma_min <= gamma_init"):
            GammaTunePolicy(8, gamma_init=gamma_init, gamma_min=gamma_min, eta=0.5, delta=1)
