"""One record per request, keyed by vLLM's ``req_id``, in one table with one sweep.

A ``RequestRecord`` holds what the drafter keeps of one request between
steps: the policy's state, what was kept of its latest draft for AdaSD's
verification (``verify.kept_draft.KeptDraft``), and, with a trace on, the
draft's probability of each token of that draft until its verification is
written.

Lifetime rule:
- a request gets a record, with the policy's initial state, the first time
  the drafter plans for it (or a verification asks for its state);
- the record is dropped when the request leaves the engine (finished or
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

from collections.abc import Callable, Collection, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_gammatune.policies.base import DraftLengthPolicy

if TYPE_CHECKING:
    from vllm_gammatune.verify.kept_draft import KeptDraft


@dataclass(slots=True)
class RequestRecord:
    """What the drafter keeps of one request between steps."""

    #: the policy's state of this request (``DraftLengthPolicy.new_state``)
    policy_state: Any
    #: a policy that learns per token: its latest draft, until verified
    kept_draft: KeptDraft | None = None
    #: with a trace only: the draft's probability of each token of its latest
    #: draft, until its verification is written
    traced_token_probs: list[float] | None = None


class RequestRecords:
    """``req_id -> RequestRecord``; never outlives its requests.

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
        self._records: dict[str, RequestRecord] = {}

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, req_id: str) -> bool:
        return req_id in self._records

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def record(self, req_id: str) -> RequestRecord:
        """The request's record, made (with the initial state) on first use."""
        record = self._records.get(req_id)
        if record is None:
            record = RequestRecord(self.policy.new_state())
            self._records[req_id] = record
        return record

    def find(self, req_id: str) -> RequestRecord | None:
        """The request's record, or None (nothing is made)."""
        return self._records.get(req_id)

    # -- the policy state -------------------------------------------------------
    def policy_state(self, req_id: str) -> Any:
        return self.record(req_id).policy_state

    def set_policy_state(self, req_id: str, state: Any) -> None:
        self.record(req_id).policy_state = state

    @property
    def policy_states(self) -> MutableMapping[str, Any]:
        """req_id -> policy state, as ``DraftLengthPolicy.observe_step``
        reads and writes them (a request's record is made on first use)."""
        return _PolicyStates(self)

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
        """Drop every record whose request is not live (and tell the other
        per-request tables); return how many records went."""
        gone = [req_id for req_id in self._records if req_id not in live_req_ids]
        for req_id in gone:
            del self._records[req_id]
        for forget in self._also_forget:
            forget(live_req_ids)
        return len(gone)


class _PolicyStates(MutableMapping):
    """The records' policy states as a mapping (``RequestRecords.policy_states``)."""

    def __init__(self, records: RequestRecords):
        self._records = records

    def __getitem__(self, req_id: str) -> Any:
        return self._records.policy_state(req_id)

    def __setitem__(self, req_id: str, state: Any) -> None:
        self._records.set_policy_state(req_id, state)

    def __delitem__(self, req_id: str) -> None:
        raise TypeError("a request's record goes with the request (forget_missing)")

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)
