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

