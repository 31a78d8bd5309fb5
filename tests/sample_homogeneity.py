"""Whether two sets of sampled continuations come from one distribution.

A chi-square test of homogeneity, position by position (the engine tests of
sampled speculative decoding, on the CPU and on a GPU, use it).
"""

from __future__ import annotations

from collections import Counter


def homogeneity_pvalue(samples_a, samples_b, position: int) -> float:
    """p-value that the tokens at ``position`` of both sample sets share one distribution."""
    from scipy.stats import chi2_contingency

    a = Counter(s[position] for s in samples_a)
    b = Counter(s[position] for s in samples_b)
    # Merge rare tokens so every expected cell count is >= 5.
    common = [t for t in set(a) | set(b) if a[t] + b[t] >= 10]
    rows = [[a[t] for t in common], [b[t] for t in common]]
    rest_a = len(samples_a) - sum(rows[0])
    rest_b = len(samples_b) - sum(rows[1])
    if rest_a + rest_b > 0:
        rows[0].append(rest_a)
        rows[1].append(rest_b)
    if len(rows[0]) < 2:
        return 1.0
    return float(chi2_contingency(rows).pvalue)


def differing_positions(samples_a, samples_b, positions, alpha: float) -> dict[int, float]:
    """{position: p-value} where the test rejects one distribution at level ``alpha``."""
    pvalues = {position: homogeneity_pvalue(samples_a, samples_b, position)
               for position in positions}
    return {position: p for position, p in pvalues.items() if p <= alpha}
