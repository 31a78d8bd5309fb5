"""The cost-aware policy (``gammatune_cost``), one module per concern:

- ``policy``: ``CostAwarePolicy``, the order in which a step's plan is made;
- ``acceptance``: each request's acceptance rate;
- ``planner``: the lengths that maximise expected tokens per second;
- ``probing``: which requests at length 0 probe, within a budget;
- ``catch_up_pricing``: what a catch-up costs a plan, when a prompt chunk drafts;
- ``decision``: the record of each step's decision, for traces.

Its cost fits and its check against the clock are ``policies.cost_model``
and ``policies.cycle_check``.
"""

from vllm_gammatune.policies.cost_aware.catch_up_pricing import CATCH_UP_HORIZON_TOKENS
from vllm_gammatune.policies.cost_aware.decision import StepDecision
from vllm_gammatune.policies.cost_aware.policy import CostAwarePolicy
from vllm_gammatune.policies.cost_aware.state import CostAwareState

__all__ = ["CATCH_UP_HORIZON_TOKENS", "CostAwarePolicy", "CostAwareState", "StepDecision"]
