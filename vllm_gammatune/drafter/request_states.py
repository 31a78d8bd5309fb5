"""Per-request policy state, keyed by vLLM's ``req_id``.

Lifetime rule:
- a request gets the policy's initial state at its first draft;
- it is dropped when the request leaves the engine (finished or aborted):
  ``forget_missing`` is given the ids the worker still holds
  (``GPUModelRunner.requests``) and drops the others;
- a preempted request stays in the worker's ``requests`` (vLLM keeps its
  cached state while it waits to be recomputed), so it resumes with the draft
  window it had learned, not from ``gamma_init``.

Pure Python; no vLLM import.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Generic, TypeVar

from vllm_gammatune.policies.base import DraftLengthPolicy

S = TypeVar("S")


class RequestStateTable(Generic[S]):
    """A dict ``req_id -> policy state`` that never outlives its requests."""

    def __init__(self, policy: DraftLengthPolicy):
        self.policy = policy
        self._states: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, req_id: str) -> bool:
        return req_id in self._states

    def get(self, req_id: str) -> Any:
        state = self._states.get(req_id)
        if state is None:
            state = self.policy.new_state()
            self._states[req_id] = state
        return state

    def set(self, req_id: str, state: Any) -> None:
        self._states[req_id] = state

    def forget_missing(self, live_req_ids: Collection[str]) -> int:
        """Drop every state whose request is not live; return how many."""
        gone = [req_id for req_id in self._states if req_id not in live_req_ids]
        for req_id in gone:
            del self._states[req_id]
        return len(gone)
