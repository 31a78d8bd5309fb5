"""Decayed shares kept apart per batch size.

Whether a request drafts depends on the batch it runs in: drafting may pay
with a wide margin at batch 1 and with a thin one, or not at all, at batch 8.
A share learnt while the server was quiet says little about a busy batch, so
the shares the policy weighs its catch-ups and prompt chunks by
(``catch_ups``, ``prompt_chunks``) are kept per batch size, as
the clock's check keeps its sums (``cycle_check``). Pure Python.
"""

from __future__ import annotations


class BatchShares:
    """A decayed share in [0, 1] per batch size.

    Args:
        memory: weight kept by the older samples of a batch size per new one.
        initial: the share of a batch size before its first sample.
    """

    def __init__(self, memory: float, initial: float):
        self.memory = memory
        self.initial = initial
        #: batch size -> share
        self._shares: dict[int, float] = {}

    def at(self, num_reqs: int) -> float:
        return self._shares.get(num_reqs, self.initial)

    def add(self, num_reqs: int, sample: float) -> None:
        m = self.memory
        self._shares[num_reqs] = m * self.at(num_reqs) + (1.0 - m) * sample
