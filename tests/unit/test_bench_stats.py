"""gammatune_tools.bench.stats: intervals and paired differences, by hand."""

import math

import pytest

from gammatune_tools.bench import stats


def test_ratio_interval():
    mean, low, high = stats.ratio_interval([1.0, 1.1, 0.9, 1.0])
    # sd 0.0816, t(0.975, 3) = 3.182: half 0.130
    assert mean == 1.0 and abs(low - 0.870) < 1e-3 and abs(high - 1.130) < 1e-3
    assert stats.ratio_interval([1.2]) == (1.2, None, None)


def test_mean_std_and_ratio_skip_what_is_missing():
    assert stats.mean_std([1.0, None, 3.0]) == (2.0, pytest.approx(math.sqrt(2)))
    assert stats.mean_std([5.0]) == (5.0, 0.0) and stats.mean_std([None]) == (None, None)
    assert stats.ratio(3.0, 2.0) == 1.5
    assert stats.ratio(None, 2.0) is None and stats.ratio(3.0, 0.0) is None


def test_wilson_interval():
    low, high = stats.wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-3) and high == pytest.approx(0.9433, abs=1e-3)
    assert stats.wilson_interval(0, 0) == (0.0, 1.0)


def test_paired_difference_counts_discordant_problems():
    method = [True, True, False, True, False, True, True, True]
    target = [True, False, False, True, True, False, False, True]
    pd = stats.paired_difference(method, target)
    assert (pd["only_method"], pd["only_reference"]) == (3, 1)
    assert pd["difference"] == pytest.approx(2 / 8)
    half = 1.96 * math.sqrt(4 - 4 / 8) / 8
    assert (pd["low"], pd["high"]) == pytest.approx((2 / 8 - half, 2 / 8 + half))
    # McNemar exact: 2 * P(Bin(4, 1/2) <= 1) = 2 * 5/16
    assert pd["p"] == pytest.approx(10 / 16)
    same = stats.paired_difference(target, target)
    assert (same["difference"], same["low"], same["high"], same["p"]) == (0.0, 0.0, 0.0, 1.0)
