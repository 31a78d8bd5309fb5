"""The online linear cost fits (``cost_aware.linear_costs``) under a mocked clock."""

from __future__ import annotations

import random
from collections import deque

import pytest

from vllm_gammatune.policies import BatchLocalLinearCost


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_online_cost_recovers_a_linear_cost_from_clock_readings():
    clock, cost = FakeClock(), BatchLocalLinearCost()
    rng = random.Random(0)
    for _ in range(200):
        n = rng.choice([4, 8, 20, 36])
        start = clock()
        clock.advance(0.08 + 0.015 * n + rng.uniform(-0.002, 0.002))
        cost.add(n, clock() - start)
    intercept, slope = cost.coefficients()
    assert intercept == pytest.approx(0.08, abs=0.01)
    assert slope == pytest.approx(0.015, abs=0.001)


def test_online_cost_ignores_idle_gaps_and_stays_non_negative():
    clock, cost = FakeClock(), BatchLocalLinearCost()
    for i in range(40):
        start = clock()
        clock.advance(0.05 if i % 10 else 0.05)
        if i == 25:
            clock.advance(30.0)  # the engine sat idle between two bursts
        assert cost.add(4, clock() - start) == (i != 25)
    assert cost.predict(4) == pytest.approx(0.05)
    intercept, slope = cost.coefficients()
    assert intercept >= 0 and slope == 0.0  # one size seen: no slope invented
    # decreasing with size (noise): clamped, never negative
    weird = BatchLocalLinearCost()
    for n, t in [(1, 0.2), (10, 0.1), (20, 0.05)] * 3:
        weird.add(n, t)
    assert min(weird.coefficients()) >= 0
    assert all(weird.predict(n) >= 0 for n in (0, 1, 100))


def test_online_cost_follows_a_machine_that_slows_down():
    cost = BatchLocalLinearCost(memory=0.9)
    for n in [2, 6] * 20:
        cost.add(n, 0.01 * n)
    for n in [2, 6] * 20:
        cost.add(n, 0.03 * n)
    assert cost.predict(6) == pytest.approx(0.18, rel=0.05)
    with pytest.raises(ValueError):
        BatchLocalLinearCost(memory=1.0)


def test_cost_fit_is_local_to_the_batch_size():
    """Flat at batch 4, steep at batch 16 (the CPU's shape): each batch size
    sees its own slope, not one line through both."""
    cost = BatchLocalLinearCost()
    for _ in range(30):
        for n in (4, 8, 12):
            cost.add(n, 0.13 + 0.001 * n, num_reqs=4)
        for n in (16, 24, 32):
            cost.add(n, 0.02 * n, num_reqs=16)
    small = cost.coefficients(4)
    large = cost.coefficients(16)
    assert small[1] == pytest.approx(0.001, abs=0.002)
    assert large[1] == pytest.approx(0.02, abs=0.003)
    assert cost.predict(8, num_reqs=4) == pytest.approx(0.138, abs=0.01)


def test_catch_up_fit_learns_a_pass_far_larger_than_any_before():
    kept, default = BatchLocalLinearCost(drop_outliers=False), BatchLocalLinearCost()
    for cost in (kept, default):
        for n in (4, 8, 12) * 4:
            cost.add(n, 0.03 + 0.0001 * n)
    # a 2,000-token pass at a prompt's rate: 100 times the line's prediction
    assert not default.add(2000, 4.6)  # a step timer's idle gap: dropped
    assert kept.add(2000, 4.6)  # a pass timed alone: learned
    assert kept.predict(2000) > 10 * default.predict(2000)


def test_online_cost_running_sums_equal_a_fit_over_the_window():
    """The fit kept up to date sample by sample (window wrapping, several
    batch sizes, rebuilds) equals one computed from the window afresh."""
    rng = random.Random(1)
    running = BatchLocalLinearCost(window=32)
    window = deque(maxlen=32)
    for step in range(200):
        b = rng.choice([1, 2, 4, 16])
        sample = (b + rng.randrange(0, 8), 0.05 + 0.01 * rng.random() * b, b)
        if running.add(*sample):
            window.append(sample)
        if step % 7 == 0:
            for b in (1, 4, 16):
                running.coefficients(b)  # sums kept from here on
        fresh = BatchLocalLinearCost(window=32, drop_outliers=False)
        for sample in window:
            fresh.add(*sample)
        for b in (1, 2, 4, 16):
            assert running.coefficients(b) == pytest.approx(fresh.coefficients(b),
                                                            rel=1e-9, abs=1e-12)
