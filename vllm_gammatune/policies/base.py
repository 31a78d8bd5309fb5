"""The draft-length policy interface.

A policy decides, per request, how many tokens the draft model proposes next
(``next_num_draft_tokens``) and learns from each verification of that request
(``observe``). Policies are pure Python and never import vLLM or torch: the
vLLM-facing proposer (``vllm_gammatune.proposer``) keeps one state object per
``req_id`` and calls the policy with plain integers.

Vocabulary at the boundary follows vLLM's: ``num_draft_tokens`` is how many
tokens were actually proposed (after any confidence stop), ``num_accepted_tokens``
how many of them the target accepted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BatchView:
    """What a policy may know about the step beyond its own request.

    The count-based policies ignore it; the cost-aware one weighs all of it.
    """

    #: requests in the step (vLLM's ``num_reqs``)
    batch_size: int
    #: tokens the target processed this step (vLLM's ``num_scheduled_tokens``
    #: total); 0 when unknown
    num_scheduled_tokens: int = 0
    #: per request, draft positions missed while drafting was skipped, which
    #: the draft must process before that request drafts again; () = none
    catch_up_tokens: tuple[int, ...] = ()
    #: some request's query this step is a prompt chunk (longer than any
    #: decode query), so a draft pass would also prefill the draft
    has_prefill: bool = False
    #: per request, tokens it may still generate (``max_tokens`` minus those
    #: generated); () = unknown
    remaining_tokens: tuple[int, ...] = ()


class DraftLengthPolicy(ABC):
    """Chooses each request's draft length from its own acceptance history.

    Args:
        max_num_draft_tokens: the hard cap (vLLM's ``num_speculative_tokens``);
            a policy never returns more, because vLLM reserves KV lookahead
            slots for at most that many draft tokens.
    """

    #: Stop drafting a request at the first draft token whose top probability
    #: is below this value (None: never stop on confidence).
    confidence_threshold: float | None = None

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
        """Every request's length for this step, in batch order.

        Per-request policies plan each request alone; a policy that weighs the
        requests against each other (``CostAwarePolicy``) overrides this and
        may return 0 (no draft for that request this step).
        """
        return [self.next_num_draft_tokens(s, batch) for s in states]

    @abstractmethod
    def observe(
        self,
        state: Any,
        num_draft_tokens: int,
        num_accepted_tokens: int,
        batch: BatchView,
    ) -> Any:
        """Return the state after one verification of this request."""

    def _clamp(self, value: int, low: int = 1) -> int:
        return max(low, min(self.max_num_draft_tokens, value))

    @staticmethod
    def _check_observation(num_draft_tokens: int, num_accepted_tokens: int) -> None:
        if not 0 <= num_accepted_tokens <= num_draft_tokens:
            raise ValueError(
                "need 0 <= num_accepted_tokens <= num_draft_tokens, got "
                f"{num_accepted_tokens} accepted of {num_draft_tokens} drafted"
            )
