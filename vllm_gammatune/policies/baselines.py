"""The papers' baselines, on the same per-request machinery.

- ``FixedDraftPolicy``: vLLM's fixed K, to measure the plugin's own overhead
  against the built-in ``draft_model`` method at equal K.
- ``HFHeuristicPolicy``: Hugging Face assisted generation's ``heuristic``
  schedule (the GammaTune paper's HFHeuristic, Mamou et al. 2024): K + 2 when
  every drafted token was accepted, else max(1, K - 1).
- ``AssistantThresholdPolicy``: a fixed draft length with Hugging Face's
  ``assistant_confidence_threshold`` stop (the paper's AssistantThreshold).
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_gammatune.policies.base import BatchView, DraftLengthPolicy
from vllm_gammatune.policies.contracts import ConfidenceStop
from vllm_gammatune.policies.observation import Verification


@dataclass
class LengthState:
    num_draft_tokens: int


class FixedDraftPolicy(DraftLengthPolicy, ConfidenceStop):
    """Always drafts ``num_draft_tokens`` (optionally with a confidence stop)."""

    def __init__(
        self,
        max_num_draft_tokens: int,
        num_draft_tokens: int,
        confidence_threshold: float | None = None,
    ):
        super().__init__(max_num_draft_tokens)
        self.num_draft_tokens = self._clamp(num_draft_tokens)
        self.confidence_threshold = confidence_threshold

    def new_state(self) -> LengthState:
        return LengthState(self.num_draft_tokens)

    def next_num_draft_tokens(self, state: LengthState, batch: BatchView) -> int:
        return state.num_draft_tokens


class AssistantThresholdPolicy(FixedDraftPolicy):
    """Fixed length with a confidence stop at a fixed threshold."""

    def __init__(
        self, max_num_draft_tokens: int, num_draft_tokens: int, confidence_threshold: float
    ):
        super().__init__(max_num_draft_tokens, num_draft_tokens, confidence_threshold)


class HFHeuristicPolicy(DraftLengthPolicy):
    """K + 2 when all drafted tokens were accepted, else max(1, K - 1)."""

    INCREASE = 2
    DECREASE = 1

    def __init__(self, max_num_draft_tokens: int, num_draft_tokens: int):
        super().__init__(max_num_draft_tokens)
        self.initial_num_draft_tokens = self._clamp(num_draft_tokens)

    def new_state(self) -> LengthState:
        return LengthState(self.initial_num_draft_tokens)

    def next_num_draft_tokens(self, state: LengthState, batch: BatchView) -> int:
        return state.num_draft_tokens

    def observe(self, state: LengthState, verification: Verification) -> LengthState:
        if verification.num_accepted_tokens == verification.num_draft_tokens:
            return LengthState(self._clamp(state.num_draft_tokens + self.INCREASE))
        return LengthState(self._clamp(state.num_draft_tokens - self.DECREASE))
