"""The cost-aware policy (``gammatune_cost``): ``CostAwarePolicy`` and the
parts it owns, one module each:

- ``policy``: ``CostAwarePolicy``, the order in which a step's plan is made,
  and what it learns from each observation;
- ``step_plans``: how a decode step, a step with a prompt chunk and its
  probes are planned;
- ``linear_costs``: the online linear fits of a pass's seconds;
- ``step_costs``: the policy's target, draft and catch-up fits, each
  measured timing to its fit, and the costs of one step they give;
- ``acceptance_rates``: each request's acceptance rate;
- ``planner``: the lengths that maximise expected tokens per second (pure
  functions);
- ``catch_ups``: catch-up pricing: each request's share of its catch-up,
  the shares per batch size it rests on (the prompt-chunk rule keeps its
  own the same way), the plan that prices the pass;
- ``probe_scheduler``: which requests at length 0 probe, within a budget;
- ``prompt_chunks``: when a step with a prompt chunk drafts;
- ``token_stop`` and ``token_acceptance``: the per-token stop and the
  estimate of each draft token's acceptance it rests on;
- ``decision``: the record of each step's decision, for traces;
- ``request_state``: a request's state under the policy, one typed record
  per part;
- ``ablation``: the parts that can be switched off, for measurement.
"""

from vllm_gammatune.policies.cost_aware.decision import StepDecision
from vllm_gammatune.policies.cost_aware.catch_ups import CATCH_UP_HORIZON_TOKENS
from vllm_gammatune.policies.cost_aware.policy import CostAwarePolicy
from vllm_gammatune.policies.cost_aware.request_state import CostAwareState

__all__ = ["CATCH_UP_HORIZON_TOKENS", "CostAwarePolicy", "CostAwareState", "StepDecision"]
