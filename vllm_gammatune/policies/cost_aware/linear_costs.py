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
does; on a small CPU the bend comes between a few and a few dozen tokens), so
``BatchLocalLinearCost`` fits the line around the current batch size: samples
from other batch sizes count less the further their batch size is (by
octaves). Pure Python.
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


def _accumulate(sums: list[float], weight: float, n: float, t: float) -> None:
    """Add one weighted sample to [w, w n, w n^2, w t, w n t]."""
    sums[0] += weight
    sums[1] += weight * n
    sums[2] += weight * n * n
    sums[3] += weight * t
    sums[4] += weight * n * t


def _line_from_sums(w: float, wn: float, wnn: float, wt: float,
                    wnt: float) -> tuple[float, float]:
    """(intercept, slope) >= 0 of the weighted least-squares line whose
    sums ``_accumulate`` built; all the weight on one size gives slope 0."""
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

    The weighted sums behind each batch size's line are kept up to date as
    samples arrive (decayed by ``memory``, the sample leaving the window
    taken out), so a fit costs O(1) per step rather than a pass over the
    window: the target fit changes every engine step, and the plugin plans
    on every step, skipped ones included. Rounding from the running update
    decays with the weights; a full pass rebuilds the sums every
    ``window`` samples anyway.

    Args:
        memory: in (0, 1), weight kept per newer sample.
        locality: how fast weight falls per octave of batch size.
        window: samples kept.
        min_samples: samples needed before ``ready``.
        drop_outliers: drop a sample more than ``OUTLIER_FACTOR`` times the
            prediction (an idle gap); off for passes timed around the
            forward alone, which hold no gap, so that a pass far larger
            than any seen is learned rather than dropped.
    """

    def __init__(self, memory: float = 0.97, locality: float = 3.0, window: int = 256,
                 min_samples: int = 3, drop_outliers: bool = True):
        if not 0.0 < memory < 1.0:
            raise ValueError(f"memory must be in (0, 1), got {memory}")
        self.memory = memory
        self.locality = locality
        self.min_samples = min_samples
        self.drop_outliers = drop_outliers
        self.num_samples = 0
        self._samples: deque[tuple[int, int, float]] = deque(maxlen=window)
        #: batch size -> the weighted sums [w, w n, w n^2, w t, w n t] of its fit
        self._sums: dict[int, list[float]] = {}

    @property
    def ready(self) -> bool:
        return self.num_samples >= self.min_samples

    def add(self, num_tokens: int, seconds: float, num_reqs: int = 1) -> bool:
        """Add one measured pass; False if dropped as an outlier (an idle gap)."""
        if seconds < 0 or num_tokens < 0:
            return False
        if (self.drop_outliers and self.num_samples >= OUTLIER_AFTER_SAMPLES
                and seconds > OUTLIER_FACTOR * self.predict(num_tokens, num_reqs)):
            return False
        sample = (max(1, num_reqs), num_tokens, float(seconds))
        leaving = (self._samples[0] if len(self._samples) == self._samples.maxlen
                   else None)
        self._samples.append(sample)
        self.num_samples += 1
        if self.num_samples % self._samples.maxlen == 0:
            self._sums.clear()  # rebuilt from the window on the next fit
        # its weight had reached memory**(window - 1); one more decay now
        leaving_age_weight = self.memory ** len(self._samples)
        for fit_num_reqs, sums in self._sums.items():
            for i in range(5):
                sums[i] *= self.memory
            _accumulate(sums, self._locality_weight(sample[0], fit_num_reqs),
                        sample[1], sample[2])
            if leaving is not None:
                _accumulate(sums, -leaving_age_weight
                            * self._locality_weight(leaving[0], fit_num_reqs),
                            leaving[1], leaving[2])
        return True

    def seconds_per_token(self) -> float | None:
        """The kept samples' seconds over their tokens, undecayed (None
        before any): a pass's price while the line has too few samples."""
        tokens = sum(n for _, n, _ in self._samples)
        if tokens <= 0:
            return None
        return sum(t for _, _, t in self._samples) / tokens

    def _locality_weight(self, sample_num_reqs: int, num_reqs: int) -> float:
        return math.exp(-self.locality * abs(math.log2(sample_num_reqs)
                                             - math.log2(num_reqs)))

    def coefficients(self, num_reqs: int = 1) -> tuple[float, float]:
        """(intercept, slope), both >= 0, around ``num_reqs``."""
        num_reqs = max(1, num_reqs)
        sums = self._sums.get(num_reqs)
        if sums is None:
            sums = [0.0] * 5
            for age, (b, n, t) in enumerate(reversed(self._samples)):
                _accumulate(sums, self.memory ** age * self._locality_weight(b, num_reqs),
                            n, t)
            self._sums[num_reqs] = sums
        return _line_from_sums(*sums)

    def predict(self, num_tokens: int, num_reqs: int = 1) -> float:
        intercept, slope = self.coefficients(num_reqs)
        return intercept + slope * num_tokens


@dataclass(frozen=True)
class FixedLinearCost:
    """A cost given, not measured (reproducible experiments and tests)."""

    intercept: float
    slope: float
    ready: bool = True

    def add(self, num_tokens: int, seconds: float, num_reqs: int = 1) -> bool:
        return False

    def coefficients(self, num_reqs: int = 1) -> tuple[float, float]:
        return self.intercept, self.slope

    def predict(self, num_tokens: int, num_reqs: int = 1) -> float:
        return self.intercept + self.slope * num_tokens
