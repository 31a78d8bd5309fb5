"""The draft-length policy: a planner, and what it may know of a step.

A policy decides, per request, how many tokens the drafter proposes next
(``plan_batch``), and learns once a step, before it plans, from what the
engine observed (``observe_step``: the verifications that reached the host,
each a ``Verification`` of one request, and the last cycle's timings;
``policies.observation``). Policies are pure Python and never import vLLM
or torch: the drafter keeps one state per ``req_id`` and calls the policy
with plain numbers.

A policy that does more is also one of the narrow contracts of
``policies.contracts`` (a threshold stop, a per-token rule, a cost
observer, a free-draft planner, a relaxed verifier, a step explainer); the
drafter recognises each by type.

Vocabulary at the boundary follows vLLM's: ``num_draft_tokens`` is how many
tokens were actually proposed (after any stop), ``num_accepted_tokens`` how
many of them the target accepted, ``num_reqs`` the requests of a step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

from vllm_gammatune.policies.observation import StepObservation, Verification


@dataclass(frozen=True)
class BatchView:
    """What a policy may know about the step beyond its own request.

    The count-based policies ignore it; the cost-aware one weighs all of it.
    """

    #: requests in the step (vLLM's ``num_reqs``)
    num_reqs: int
    #: tokens the target processed this step (vLLM's ``num_scheduled_tokens``
    #: total); 0 when unknown
    num_scheduled_tokens: int = 0
    #: [num_reqs] draft positions missed while drafting was skipped, which
    #: the draft must process before that request drafts again; () = none
    catch_up_tokens: tuple[int, ...] = ()
    #: some request's query this step is a prompt chunk (longer than any
    #: decode query), so a draft pass would also prefill the draft
    has_prefill: bool = False
    #: [num_reqs] tokens each request may still generate (``max_tokens``
    #: minus those generated); () = unknown
    remaining_tokens: tuple[int, ...] = ()
    #: [num_reqs] the most draft tokens each request's drafter can offer this
    #: step (an n-gram drafter: the length of the text that follows its
    #: match, 0 without a match); () = the cap for every request
    draft_limits: tuple[int, ...] = ()
    #: [num_reqs] the tokens of a free draft (an n-gram's) each request
    #: verifies this step instead of a policy-planned draft; () = none
    free_draft_tokens: tuple[int, ...] = ()


class DraftLengthPolicy(ABC):
    """Chooses each request's draft length from its own acceptance history.

    Args:
        max_num_draft_tokens: the hard cap (vLLM's ``num_speculative_tokens``);
            a policy never returns more, because vLLM reserves KV lookahead
            slots for at most that many draft tokens.
    """

    def __init__(self, max_num_draft_tokens: int):
        if max_num_draft_tokens < 1:
            raise ValueError(
                f"max_num_draft_tokens must be >= 1, got {max_num_draft_tokens}"
            )
        self.max_num_draft_tokens = max_num_draft_tokens

    @abstractmethod
    def new_state(self) -> Any:
        """The state of a request that has not been verified yet."""

    @abstractmethod
    def next_num_draft_tokens(self, state: Any, batch: BatchView) -> int:
        """How many tokens to draft next for this request (1..cap)."""

    def plan_batch(self, states: list[Any], batch: BatchView) -> list[int]:
        """[num_reqs] every request's length for this step, in batch order.

        Per-request policies plan each request alone; a policy that weighs
        the requests against each other (``CostAwarePolicy``) overrides this
        and may return 0 (no draft for that request this step).
        """
        return [self.next_num_draft_tokens(s, batch) for s in states]

    def observe_step(self, observation: StepObservation,
                     states: MutableMapping[str, Any]) -> None:
        """Learn from one step's observation, before the step's plan.
        ``states``: req_id -> the request's state; a verification's request
        gets the state ``observe`` returns. Default: each verification in
        the order it came."""
        for verification in observation.verifications:
            req_id = verification.req_id
            states[req_id] = self.observe(states[req_id], verification)

    def observe(self, state: Any, verification: Verification) -> Any:
        """Return the request's state after one verification of its draft.
        Default: it changes nothing (a fixed length)."""
        return state

    def _clamp(self, value: int, low: int = 1) -> int:
        return max(low, min(self.max_num_draft_tokens, value))
