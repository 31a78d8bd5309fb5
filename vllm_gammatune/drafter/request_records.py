"""One record per request, keyed by vLLM's ``req_id``, in one table with one sweep.

Per request the drafter keeps, between steps, the policy's state (in
``PolicyStates``, a dict the policy reads and writes at dict speed) and a
``RequestRecord``: what was kept of its latest draft for AdaSD's
verification (``verify.kept_draft.KeptDraft``), and, with a trace on, the
draft's probability of each token of that draft until its verification is
written.

Lifetime rule:
- a request gets the policy's initial state the first time the drafter
  plans for it (or a verification asks for its state), and a record when
  something of its draft is kept;
- both are dropped when the request leaves the engine (finished or
  aborted): ``forget_missing`` is given the ids the worker still holds
  (``GPUModelRunner.requests``) and drops the others;
- a preempted request stays in the worker's ``requests`` (vLLM keeps its
  cached state while it waits to be recomputed), so it resumes with the draft
  window it had learned, not from ``gamma_init``.

Two per-request tables live outside the records and are swept by the same
``forget_missing`` (``also_forget``): the draft-KV holes
(``draft_kv.holes.DraftKVHoles``, which shares its book-keeping with per-block
state that outlives requests) and the trace writer's step counters
(``telemetry.trace``, which knows nothing of the drafter).

Pure Python; no vLLM or torch import.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_gammatune.policies.base import DraftLengthPolicy

if TYPE_CHECKING:
    from vllm_gammatune.verify.kept_draft import KeptDraft


@dataclass(slots=True)
class RequestRecord:
    """What the drafter keeps of one request between steps besides the
    policy's state (``RequestRecords.policy_states``)."""

    #: a policy that learns per token: its latest draft, until verified
    kept_draft: KeptDraft | None = None
    #: with a trace only: the draft's probability of each token of its latest
    #: draft, until its verification is written
    traced_token_probs: list[float] | None = None


class PolicyStates(dict):
    """``req_id -> policy state`` (``DraftLengthPolicy.new_state``), a
    request's made on first use. A plain dict otherwise: the policy reads
    and writes every request's state each step, at dict speed."""

    __slots__ = ("_new_state",)

    def __init__(self, new_state: Callable[[], Any]):
        super().__init__()
        self._new_state = new_state

    def __missing__(self, req_id: str) -> Any:
        state = self[req_id] = self._new_state()
        return state


class RequestRecords:
    """``req_id -> `` the policy's state and a ``RequestRecord``; never
    outlives its requests.

    Args:
        policy: makes a new request's initial state.
        also_forget: further per-request tables, each a callable given the
            live req_ids at every sweep.

    It is also the ``verify.adasd_verifier.VerificationRecords`` AdaSD's
    verification reads and closes.
    """

    def __init__(self, policy: DraftLengthPolicy,
                 also_forget: Sequence[Callable[[Collection[str]], None]] = ()):
        self.policy = policy
        self._also_forget = tuple(also_forget)
        #: req_id -> the policy's state, as ``DraftLengthPolicy.observe_step``
        #: and ``plan_batch`` read and write them; every tracked request has one
        self.policy_states = PolicyStates(policy.new_state)
        self._records: dict[str, RequestRecord] = {}

    def __len__(self) -> int:
        return len(self.policy_states)

    def __contains__(self, req_id: str) -> bool:
        return req_id in self.policy_states

    def __iter__(self) -> Iterator[str]:
        return iter(self.policy_states)

    def record(self, req_id: str) -> RequestRecord:
        """The request's record, made (with the initial state) on first use."""
        self.policy_states[req_id]  # noqa: B018 -- made on first use
        record = self._records.get(req_id)
        if record is None:
            record = self._records[req_id] = RequestRecord()
        return record

    def find(self, req_id: str) -> RequestRecord | None:
        """The request's record, or None (nothing is made)."""
        return self._records.get(req_id)

    # -- the policy state -------------------------------------------------------
    def policy_state(self, req_id: str) -> Any:
        return self.policy_states[req_id]

    def set_policy_state(self, req_id: str, state: Any) -> None:
        self.policy_states[req_id] = state

    # -- kept drafts (AdaSD's verification) -------------------------------------
    @property
    def num_kept_drafts(self) -> int:
        return sum(r.kept_draft is not None for r in self._records.values())

    def keep_draft(self, req_id: str, kept: KeptDraft) -> None:
        self.record(req_id).kept_draft = kept

    def kept_draft(self, req_id: str) -> KeptDraft | None:
        record = self._records.get(req_id)
        return None if record is None else record.kept_draft

    def close_verification(self, req_id: str) -> None:
        """The request's draft is verified: drop what was kept of it."""
        self.record(req_id).kept_draft = None

    # -- traced token probabilities ---------------------------------------------
    def keep_traced_token_probs(self, req_id: str, token_probs: list[float]) -> None:
        self.record(req_id).traced_token_probs = token_probs

    def take_traced_token_probs(self, req_id: str) -> list[float] | None:
        """The kept token probabilities of the request's latest draft, once."""
        record = self._records.get(req_id)
        if record is None:
            return None
        token_probs, record.traced_token_probs = record.traced_token_probs, None
        return token_probs

    # -- the sweep ----------------------------------------------------------------
    def forget_missing(self, live_req_ids: Collection[str]) -> int:
        """Drop every request that is not live, its state and record (and
        tell the other per-request tables); return how many went."""
        states = self.policy_states
        gone = [req_id for req_id in states if req_id not in live_req_ids]
        for req_id in gone:
            del states[req_id]
            self._records.pop(req_id, None)
        for forget in self._also_forget:
            forget(live_req_ids)
        return len(gone)
