"""Draft-length policies: pure Python, no vLLM import (tested directly).

A policy is a planner (``base``); the narrow contracts it may add are in
``contracts``; what it learns each step is one ``observation.StepObservation``.
"""

from vllm_gammatune.policies.adasd import ADASD_MODES, AdaSDPolicy, AdaSDState
from vllm_gammatune.policies.base import BatchView, DraftLengthPolicy
from vllm_gammatune.policies.baselines import (
    AssistantThresholdPolicy,
    FixedDraftPolicy,
    HFHeuristicPolicy,
)
from vllm_gammatune.policies.contracts import (
    ConfidenceStop,
    CostObserver,
    DrafterTraits,
    ExplainsSteps,
    FreeDraftPlanner,
    RelaxedVerifier,
    ThresholdStop,
    TokenRule,
)
from vllm_gammatune.policies.cost_aware import (
    CostAwarePolicy,
    CostAwareState,
    StepDecision,
)
from vllm_gammatune.policies.cost_aware.linear_costs import (
    BatchLocalLinearCost,
    FixedLinearCost,
)
from vllm_gammatune.policies.gammatune import GammaTunePolicy, GammaTuneState
from vllm_gammatune.policies.observation import (
    CatchUpPassTiming,
    CycleTimings,
    CycleWallTime,
    DraftPassTiming,
    DraftSource,
    PassesRun,
    StepObservation,
    TargetStepTiming,
    TokenVerdicts,
    Verification,
)

__all__ = [
    "ADASD_MODES",
    "AdaSDPolicy",
    "AdaSDState",
    "AssistantThresholdPolicy",
    "BatchLocalLinearCost",
    "BatchView",
    "CatchUpPassTiming",
    "ConfidenceStop",
    "CostAwarePolicy",
    "CostAwareState",
    "CostObserver",
    "CycleTimings",
    "CycleWallTime",
    "DraftLengthPolicy",
    "DraftPassTiming",
    "DraftSource",
    "DrafterTraits",
    "ExplainsSteps",
    "FixedDraftPolicy",
    "FixedLinearCost",
    "FreeDraftPlanner",
    "GammaTunePolicy",
    "GammaTuneState",
    "HFHeuristicPolicy",
    "PassesRun",
    "RelaxedVerifier",
    "StepDecision",
    "StepObservation",
    "TargetStepTiming",
    "ThresholdStop",
    "TokenRule",
    "TokenVerdicts",
    "Verification",
]
