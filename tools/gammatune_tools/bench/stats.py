"""Statistics of the harness: means with their spread, intervals of ratios
and of proportions, paired differences."""

from __future__ import annotations

import math
import statistics


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation of the values that are not None."""
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def ratio_interval(ratios: list[float]) -> tuple[float, float | None, float | None]:
    """Mean of the per-run ratios and its 95% t-interval (None with one run)."""
    mean = statistics.mean(ratios)
    if len(ratios) < 2:
        return mean, None, None
    from scipy.stats import t

    half = t.ppf(0.975, len(ratios) - 1) * statistics.stdev(ratios) / len(ratios) ** 0.5
    return mean, mean - half, mean + half


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a proportion (95% at the default ``z``)."""
    if n == 0:
        return (0.0, 1.0)
    phat = successes / n
    denom = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / denom
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def paired_difference(method_correct: list[bool], reference_correct: list[bool]
                      ) -> dict[str, float]:
    """Paired accuracy difference (method - reference) on the same problems.

    ``only_method``/``only_reference``: discordant problems. ``low``/``high``:
    Wald 95% interval of the difference of paired proportions,
    d +- 1.96 sqrt((b + c - (b - c)^2 / n) / n^2). ``p``: McNemar's exact
    two-sided p-value, a binomial(b + c, 1/2) test on the discordant pairs.
    """
    n = len(method_correct)
    b = sum(m and not r for m, r in zip(method_correct, reference_correct))
    c = sum(r and not m for m, r in zip(method_correct, reference_correct))
    diff = (b - c) / n if n else 0.0
    half = 1.96 * math.sqrt(max(b + c - (b - c) ** 2 / n, 0.0)) / n if n else 0.0
    discordant = b + c
    tail = sum(math.comb(discordant, i) for i in range(min(b, c) + 1)) / 2 ** discordant
    return {"only_method": b, "only_reference": c, "difference": diff,
            "low": diff - half, "high": diff + half, "p": min(1.0, 2 * tail)}


#: the interval's coverage and the resamples behind it
BOOTSTRAP_LEVEL = 0.95
BOOTSTRAP_RESAMPLES = 2000


def two_level_bootstrap(statistic, num_rounds: int, num_units: int,
                        resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                        level: float = BOOTSTRAP_LEVEL
                        ) -> tuple[float, float | None, float | None]:
    """``statistic(rounds, units)`` on the data and its percentile interval
    (None, None for one round of one unit: nothing to resample, and a
    zero-width interval would read as certainty).

    ``statistic`` takes two index arrays, the rounds and the units (prompts,
    or batches of prompts: a batch counts once) to use, repeats allowed.
    Each resample draws rounds and units together, both with replacement:
    rounds alone would treat the prompts as fixed and leave out how much a
    different prompt set moves the ratio, which on speculative decoding is
    most of the spread. Seeded, so a table written twice reads the same.
    """
    import numpy

    if num_rounds < 1 or num_units < 1:
        raise ValueError(f"bootstrap: needs rounds and units; got {num_rounds} rounds, "
                         f"{num_units} units")
    rng = numpy.random.default_rng(seed)
    point = float(statistic(numpy.arange(num_rounds), numpy.arange(num_units)))
    if num_rounds == 1 and num_units == 1:
        return point, None, None
    samples = [statistic(rng.integers(0, num_rounds, num_rounds),
                         rng.integers(0, num_units, num_units)) for _ in range(resamples)]
    tail = (1 - level) / 2 * 100
    low, high = numpy.percentile(samples, [tail, 100 - tail])
    return point, float(low), float(high)


def verdict(low: float | None, high: float | None) -> str:
    """Words as strong as a ratio's interval: "faster" when it lies above 1,
    "slower" below, "at parity" when it holds 1, "no interval" when there
    is none."""
    if low is None or high is None:
        return "no interval"
    if low > 1.0:
        return "faster"
    if high < 1.0:
        return "slower"
    return "at parity"
