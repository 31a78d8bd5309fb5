"""Step costs measured online: seconds as a linear function of tokens in a pass.

The cost-aware policy needs two costs, both measured by the engine while it
serves (nothing written per machine):

- the target step, ``t_target(n) = a + b * n`` for ``n`` tokens scheduled in
  the step (vLLM's ``num_scheduled_tokens``: one per request plus its draft
  tokens, or a prefill chunk); it includes what vLLM does around the forward
  (scheduling, sampling, output processing), since that is what a step costs;
- one draft forward pass, ``t_draft(n) = c + d * n`` for ``n`` tokens in it
  (the first pass over the step's target tokens, the later passes over one
  token per request); catch-up passes, prefill-like, get a fit of their own.

Each is fitted by exponentially weighted least squares (``memory`` is the
weight kept by older samples at each new one), so the fit follows a machine
whose speed drifts. A step's cost is not linear over all sizes (flat while the
weights' memory traffic dominates, then growing with the tokens once compute
does: on the 2-core CPU a target step costs about the same for 1 and 4 tokens
and three times as much for 16), so ``BatchLocalLinearCost`` fits the line
around the current batch size: samples from other batch sizes count less the
further their batch size is (by octaves). Pure Python.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

#: After this many samples, a sample more than OUTLIER_FACTOR times the
#: prediction is dropped (an idle gap between two bursts of requests is not a
#: step cost).
OUTLIER_AFTER_SAMPLES = 8
OUTLIER_FACTOR = 5.0


def weighted_line(samples, weights) -> tuple[float, float]:
    """(intercept, slope) >= 0 of the weighted least-squares line through
    ``samples`` = [(n, t)]; all the weight on one size gives slope 0."""
    w = wn = wnn = wt = wnt = 0.0
    for (n, t), weight in zip(samples, weights):
        w += weight
        wn += weight * n
        wnn += weight * n * n
        wt += weight * t
        wnt += weight * n * t
    if w <= 0.0:
        return 0.0, 0.0
    mean_n, mean_t = wn / w, wt / w
    variance = wnn / w - mean_n * mean_n
    if variance <= 1e-9 * (1.0 + mean_n * mean_n):
        return mean_t, 0.0
    slope = max(0.0, (wnt / w - mean_n * mean_t) / variance)
    intercept = mean_t - slope * mean_n
    if intercept < 0.0:
        intercept, slope = 0.0, mean_t / mean_n if mean_n > 0 else 0.0
    return intercept, slope


class BatchLocalLinearCost:
    """``seconds(n) = intercept + slope * n`` around a batch size, fitted online.

    Keeps the last ``window`` samples (batch size, tokens, seconds). The fit
    for batch size ``B`` weighs a sample ``memory**age *
    exp(-locality * |log2(B_i / B)|)``: recent samples and samples from nearby
    batch sizes count most (with locality 3, a sample two octaves away, batch 4
    for batch 16, weighs 0.25%; one octave away, 5%).

    Args:
        memory: in (0, 1), weight kept per newer sample.
        locality: how fast weight falls per octave of batch size.
        window: samples kept.
        min_samples: samples needed before ``ready``.
    """

    def __init__(self, memory: float = 0.97, locality: float = 3.0, window: int = 256,
                 min_samples: int = 3):
        if not 0.0 < memory < 1.0:
            raise ValueError(f"memory must be in (0, 1), got {memory}")
        self.memory = memory
        self.locality = locality
        self.min_samples = min_samples
        self.num_samples = 0
        self._samples: deque[tuple[int, int, float]] = deque(maxlen=window)
        self._cache: dict[int, tuple[float, float]] = {}

    @property
    def ready(self) -> bool:
        return self.num_samples >= self.min_samples

    def add(self, num_tokens: int, seconds: float, batch_size: int = 1) -> bool:
        """Add one measured pass; False if dropped as an outlier (an idle gap)."""
        if seconds < 0 or num_tokens < 0:
            return False
        if (self.num_samples >= OUTLIER_AFTER_SAMPLES
                and seconds > OUTLIER_FACTOR * self.predict(num_tokens, batch_size)):
            return False
        self._samples.append((max(1, batch_size), num_tokens, float(seconds)))
        self.num_samples += 1
        self._cache.clear()
        return True

    def coefficients(self, batch_size: int = 1) -> tuple[float, float]:
        """(intercept, slope), both >= 0, around ``batch_size``."""
        batch_size = max(1, batch_size)
        cached = self._cache.get(batch_size)
        if cached is not None:
            return cached
        count = len(self._samples)
        octave = math.log2(batch_size)
        weights = [self.memory ** (count - 1 - i)
                   * math.exp(-self.locality * abs(math.log2(b) - octave))
                   for i, (b, _, _) in enumerate(self._samples)]
        result = weighted_line([(n, t) for _, n, t in self._samples], weights)
        self._cache[batch_size] = result
        return result

    def predict(self, num_tokens: int, batch_size: int = 1) -> float:
        intercept, slope = self.coefficients(batch_size)
        return intercept + slope * num_tokens


@dataclass(frozen=True)
class FixedLinearCost:
    """A cost given, not measured (reproducible experiments and tests)."""

    intercept: float
    slope: float
    ready: bool = True

    def add(self, num_tokens: int, seconds: float, batch_size: int = 1) -> bool:
        return False

    def coefficients(self, batch_size: int = 1) -> tuple[float, float]:
        return self.intercept, self.slope

    def predict(self, num_tokens: int, batch_size: int = 1) -> float:
        return self.intercept + self.slope * num_tokens
