"""The policy's cost fits and the costs of one step they give
(``cost_aware.step_costs``)."""

from __future__ import annotations

import pytest
from policy_simulation import measured_cpu_policy, predicted_of

from vllm_gammatune.policies import BatchView, FixedLinearCost
from vllm_gammatune.policies.cost_aware.step_costs import CostFits


def test_a_steps_costs_come_from_the_fits_around_its_batch_size():
    fits = CostFits(FixedLinearCost(0.1, 0.02), FixedLinearCost(0.04, 0.002))
    assert fits.ready and fits.coefficients(4) == (0.1, 0.02, 0.04, 0.002)
    costs = fits.at(num_scheduled_tokens=10, num_reqs=4)
    assert costs.target_now == pytest.approx(0.1 + 0.02 * 4)
    assert costs.per_token == pytest.approx(0.022)
    assert costs.first_pass == pytest.approx(0.04 + 0.002 * (10 + 4))
    assert costs.later_pass == pytest.approx(0.04 + 0.002 * 4)
    # fixed costs: the draft's line prices a catch-up too
    assert (costs.catch_up_base, costs.catch_up_per_token) == (0.04, 0.002)
    # 0 scheduled tokens (unknown): one per request
    assert fits.at(0, 4).first_pass == pytest.approx(0.04 + 0.002 * 8)


def test_measured_fits_are_ready_once_both_have_samples():
    fits = CostFits()
    for n in (3, 9, 3):
        fits.target.add(n, 0.1 + 0.01 * n, 1)
    assert not fits.ready and fits.catch_up_line(1) is None
    for n in (3, 9, 3):
        fits.draft.add(n, 0.03 + 0.001 * n, 1)
    assert fits.ready
    # no catch-up or prompt pass timed yet: the decode draft line stands in
    costs = fits.at(3, 1)
    assert costs.catch_up_per_token == pytest.approx(fits.draft.coefficients(1)[1])
    fits.catch_up.add(200, 0.5)
    assert fits.catch_up_line(1) == (0.0, pytest.approx(0.5 / 200))


def test_catch_up_is_priced_from_prompt_passes_before_its_fit_is_ready():
    p = measured_cpu_policy()
    assert not p.costs.catch_up.ready
    assert p.costs.catch_up_line(16) == (0.0, pytest.approx(0.4 / 171))
    # a 2,160-token catch-up (16 new requests' prompts) costs ~5 s, not
    # the decode pass's slope (~0.4 ms) times it
    states = [p.new_state() for _ in range(16)]
    rates = [p.acceptance.rate(s.acceptance) for s in states]
    batch = BatchView(16, 16, catch_up_tokens=(135,) * 16)
    skipped = predicted_of(p, rates, batch, [0] * 16)[1]
    probed = predicted_of(p, rates, batch, [1] * 16)[1]
    assert probed - skipped > 2160 * 0.4 / 171
