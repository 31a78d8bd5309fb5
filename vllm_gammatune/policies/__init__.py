"""Draft-length policies: pure Python, no vLLM import (tested directly)."""

from vllm_gammatune.policies.adasd import ADASD_MODES, AdaSDPolicy, AdaSDState
from vllm_gammatune.policies.base import BatchView, DraftLengthPolicy
from vllm_gammatune.policies.baselines import (
    AssistantThresholdPolicy,
    FixedDraftPolicy,
    HFHeuristicPolicy,
)
from vllm_gammatune.policies.cost_aware import (
    CostAwarePolicy,
    CostAwareState,
    StepDecision,
)
from vllm_gammatune.policies.cost_aware.cycle_check import CycleCheck
from vllm_gammatune.policies.cost_aware.linear_costs import (
    BatchLocalLinearCost,
    FixedLinearCost,
)
from vllm_gammatune.policies.gammatune import GammaTunePolicy, GammaTuneState

__all__ = [
    "ADASD_MODES",
    "AdaSDPolicy",
    "AdaSDState",
    "AssistantThresholdPolicy",
    "BatchLocalLinearCost",
    "BatchView",
    "CostAwarePolicy",
    "CostAwareState",
    "CycleCheck",
    "DraftLengthPolicy",
    "FixedDraftPolicy",
    "FixedLinearCost",
    "GammaTunePolicy",
    "GammaTuneState",
    "HFHeuristicPolicy",
    "StepDecision",
]
