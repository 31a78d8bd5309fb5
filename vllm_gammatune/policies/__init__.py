"""Draft-length policies: pure Python, no vLLM import (tested directly)."""

from vllm_gammatune.policies.base import BatchView, DraftLengthPolicy
from vllm_gammatune.policies.baselines import (
    AssistantThresholdPolicy,
    FixedDraftPolicy,
    HFHeuristicPolicy,
)
from vllm_gammatune.policies.gammatune import GammaTunePolicy, GammaTuneState

__all__ = [
    "AssistantThresholdPolicy",
    "BatchView",
    "DraftLengthPolicy",
    "FixedDraftPolicy",
    "GammaTunePolicy",
    "GammaTuneState",
    "HFHeuristicPolicy",
]
