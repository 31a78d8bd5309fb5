"""Step costs measured online: seconds as a linear function of tokens in a pass.

The cost-aware policy needs two costs, both measured by the engine while it
serves (nothing written per machine):

- the target step, ``t_target(n) = a + b * n`` for ``n`` tokens scheduled in
  the step (vLLM's ``num_scheduled_tokens``: one per request plus its draft
  tokens, or a prefill chunk); it includes what vLLM does around the forward
  (scheduling, sampling, output processing), since that is what a step costs;
- one draft forward pass, ``t_draft(n) = c + d * n`` for ``n`` tokens in it
  (the first pass over the step's target tokens, the later passes over one
  token per request, and catch-up passes).

Both are fitted by exponentially weighted least squares (``memory`` is the
weight kept by older samples at each new one), so the fit follows a machine
whose speed drifts and a batch whose shape changes. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass

#: After this many samples, a sample more than OUTLIER_FACTOR times the
#: prediction is dropped (an idle gap between two bursts of requests is not a
#: step cost).
OUTLIER_AFTER_SAMPLES = 8
OUTLIER_FACTOR = 5.0


class OnlineLinearCost:
    """``seconds(n) = intercept + slope * n``, fitted online.

    Args:
        memory: in (0, 1); each new sample multiplies the weight of the older
            ones by this (0.95 remembers about the last 20 samples).
        min_samples: samples needed before ``ready``.
    """

    def __init__(self, memory: float = 0.95, min_samples: int = 3):
        if not 0.0 < memory < 1.0:
            raise ValueError(f"memory must be in (0, 1), got {memory}")
        self.memory = memory
        self.min_samples = min_samples
        self.num_samples = 0
        # weighted sums of 1, n, n^2, t, n*t
        self._w = self._wn = self._wnn = self._wt = self._wnt = 0.0

    @property
    def ready(self) -> bool:
        return self.num_samples >= self.min_samples

    def add(self, num_tokens: int, seconds: float) -> bool:
        """Add one measured pass; False if it was dropped as an outlier."""
        if seconds < 0 or num_tokens < 0:
            return False
        if (self.num_samples >= OUTLIER_AFTER_SAMPLES
                and seconds > OUTLIER_FACTOR * self.predict(num_tokens)):
            return False
        m = self.memory
        n, t = float(num_tokens), float(seconds)
        self._w = m * self._w + 1.0
        self._wn = m * self._wn + n
        self._wnn = m * self._wnn + n * n
        self._wt = m * self._wt + t
        self._wnt = m * self._wnt + n * t
        self.num_samples += 1
        return True

    def coefficients(self) -> tuple[float, float]:
        """(intercept, slope), both >= 0; (0, 0) before any sample."""
        if self._w == 0.0:
            return 0.0, 0.0
        mean_n = self._wn / self._w
        mean_t = self._wt / self._w
        variance = self._wnn / self._w - mean_n * mean_n
        if variance <= 1e-9 * (1.0 + mean_n * mean_n):
            # every sample at one size: no slope can be seen, charge it all
            # per pass (what one more token costs is learned once sizes vary)
            return mean_t, 0.0
        slope = (self._wnt / self._w - mean_n * mean_t) / variance
        slope = max(0.0, slope)
        intercept = mean_t - slope * mean_n
        if intercept < 0.0:
            intercept, slope = 0.0, mean_t / mean_n if mean_n > 0 else 0.0
        return intercept, slope

    def predict(self, num_tokens: int) -> float:
        intercept, slope = self.coefficients()
        return intercept + slope * num_tokens


@dataclass(frozen=True)
class FixedLinearCost:
    """A cost given, not measured (reproducible experiments and tests)."""

    intercept: float
    slope: float
    ready: bool = True

    def add(self, num_tokens: int, seconds: float) -> bool:
        return False

    def coefficients(self) -> tuple[float, float]:
        return self.intercept, self.slope

    def predict(self, num_tokens: int) -> float:
        return self.intercept + self.slope * num_tokens
