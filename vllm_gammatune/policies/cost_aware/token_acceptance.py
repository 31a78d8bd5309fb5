"""The acceptance of one draft token, estimated from what is known when it is drafted.

Once the draft has proposed its ``i``-th token, the drafter knows the draft's
own probability ``q`` of that token (its top probability under greedy
decoding; of the sampled token, after temperature, when sampling), the
position ``i`` and the request's history. The estimate of the chance that
verification accepts the token, given that the tokens before it were
accepted, is a logistic regression on these, as vLLM's
``OnlineAcceptanceEstimator`` fits it for adaptive verification:

    alpha_i = sigmoid(w0 + w1 * logit(q_i) + bias[position i] + bias_r)

- ``w0, w1`` and the per-position biases are shared by every request of the
  engine; ``bias_r`` is the request's own offset, pulled toward 0 (a new
  request starts from what the engine has learned and refines it).
- Cold start: ``w0 = 0, w1 = 1`` and every bias 0, i.e. ``alpha = q``: the
  draft's own probability, which is what acceptance would be if the draft
  were calibrated to the target.
- Learning: each verification labels the tokens it saw, in order: the
  accepted ones 1, the first rejected one 0; tokens after a rejection are not
  labelled (their acceptance was never tested). One step of stochastic
  gradient ascent on the log-likelihood per label, with AdaGrad step sizes,
  so the fit follows a drifting text without a schedule to tune.

``calibration`` keeps predicted against observed acceptance in bins of the
prediction, the data of a reliability plot. Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: q is kept inside [PROB_FLOOR, 1 - PROB_FLOOR] before its logit
PROB_FLOOR = 1e-4
#: positions beyond this share the last position's bias
NUM_POSITION_BIASES = 8
#: bins of predicted acceptance in ``calibration``
NUM_CALIBRATION_BINS = 10


def logit(q: float) -> float:
    q = min(1.0 - PROB_FLOOR, max(PROB_FLOOR, q))
    return math.log(q / (1.0 - q))


def sigmoid(z: float) -> float:
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


class TokenAcceptanceModel:
    """Online logistic calibration of draft-token acceptance.

    Args:
        learning_rate: AdaGrad's base step for the shared weights.
        request_learning_rate: the step of a request's own offset.
        request_decay: per label, the request offset's pull toward 0.
    """

    def __init__(self, learning_rate: float = 0.2, request_learning_rate: float = 0.1,
                 request_decay: float = 0.02):
        self.learning_rate = learning_rate
        self.request_learning_rate = request_learning_rate
        self.request_decay = request_decay
        self.w0 = 0.0
        self.w1 = 1.0
        self.position_bias = [0.0] * NUM_POSITION_BIASES
        # AdaGrad's sums of squared gradients (w0, w1, per position)
        self._g0 = self._g1 = 1.0
        self._gpos = [1.0] * NUM_POSITION_BIASES
        self.num_labels = 0
        #: per bin of prediction: [labels, sum of predictions, accepted]
        self._bins = [[0, 0.0, 0] for _ in range(NUM_CALIBRATION_BINS)]

    def predict(self, feature: float, position: int, request_bias: float = 0.0) -> float:
        """alpha for a token with ``feature = logit(q)`` at 1-based ``position``."""
        bias = self.position_bias[min(position, NUM_POSITION_BIASES) - 1]
        return sigmoid(self.w0 + self.w1 * feature + bias + request_bias)

    def learn(self, features: Sequence[float], num_accepted_tokens: int,
              request_bias: float) -> float:
        """Label the tokens one verification saw (``features`` are the
        drafted tokens' ``logit(q)`` in order; the first
        ``num_accepted_tokens`` were accepted, the next one rejected, if
        any); return the request's new offset."""
        labelled = min(len(features), num_accepted_tokens + 1)
        for index in range(labelled):
            accepted = 1.0 if index < num_accepted_tokens else 0.0
            feature = features[index]
            slot = min(index + 1, NUM_POSITION_BIASES) - 1
            predicted = self.predict(feature, index + 1, request_bias)
            self._count(predicted, accepted)
            error = accepted - predicted  # d log-likelihood / d z
            self._g0 += error * error
            self._g1 += (error * feature) ** 2
            self._gpos[slot] += error * error
            rate = self.learning_rate
            self.w0 += rate * error / math.sqrt(self._g0)
            self.w1 += rate * error * feature / math.sqrt(self._g1)
            self.position_bias[slot] += rate * error / math.sqrt(self._gpos[slot])
            request_bias = ((1.0 - self.request_decay) * request_bias
                            + self.request_learning_rate * error)
            self.num_labels += 1
        return request_bias

    def _count(self, predicted: float, accepted: float) -> None:
        row = self._bins[min(int(predicted * NUM_CALIBRATION_BINS), NUM_CALIBRATION_BINS - 1)]
        row[0] += 1
        row[1] += predicted
        row[2] += int(accepted)

    def calibration(self) -> list[tuple[float, float, float, int]]:
        """Per bin of predicted acceptance with labels: (bin's lower edge,
        mean prediction, observed acceptance, labels), predictions made
        before each label was learned."""
        return [(i / NUM_CALIBRATION_BINS, total / n, accepted / n, n)
                for i, (n, total, accepted) in enumerate(self._bins) if n]
