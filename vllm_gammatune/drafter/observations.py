"""One verification's counts, taught to the policy: shared by both drafters.

After vLLM's rejection sampler, a request that had ``k`` draft tokens keeps
``accepted + 1`` sampled tokens (0 when its sampled token is discarded, a
prompt chunk). The drafter hands each such count to its policy
(``DraftLengthPolicy.observe``) and, with a trace on, writes the line of the
verification. A policy that learns per token (AdaSD) learns at the rejection
sampler instead (``verify.adasd_verifier``) and is not called here.
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm_gammatune.drafter.request_records import RequestRecords
from vllm_gammatune.policies import BatchView, DraftLengthPolicy
from vllm_gammatune.telemetry import trace


def accepted_draft_tokens(num_draft_tokens: int, num_valid: int) -> int:
    """The draft tokens a verification accepted: ``num_valid`` sampled tokens
    kept (accepted + 1; 0 if discarded) of ``num_draft_tokens`` verified."""
    return max(0, min(num_draft_tokens, num_valid - 1))


def observe_verifications(policy: DraftLengthPolicy, records: RequestRecords,
                          req_ids: Sequence[str], num_draft_tokens: Sequence[int],
                          valid_counts: Sequence[int]) -> None:
    """Teach ``policy`` one step's verifications. ``num_draft_tokens``:
    [num_reqs] draft tokens verified; ``valid_counts``: [num_reqs] accepted
    drafts + 1 (0 if discarded); both in the step's input batch order."""
    if policy.learns_per_token:
        return
    batch = BatchView(batch_size=len(req_ids))
    for req_id, drafted, num_valid in zip(req_ids, num_draft_tokens, valid_counts):
        if drafted <= 0 or num_valid <= 0:
            continue
        accepted = accepted_draft_tokens(drafted, num_valid)
        state = records.policy_state(req_id)
        if trace.writer() is not None:  # VLLM_GAMMATUNE_TRACE only
            _trace_verification(policy, records, req_id, state, drafted, accepted)
        records.set_policy_state(req_id, policy.observe(state, drafted, accepted, batch))


def _trace_verification(policy: DraftLengthPolicy, records: RequestRecords, req_id: str,
                        state, drafted: int, accepted: int) -> None:
    details = {}
    probs = records.take_traced_token_probs(req_id)
    if probs is not None:
        details["token_probs"] = [round(q, 4) for q in probs[:drafted]]
    details.update(policy.verification_details(state, drafted) or {})
    trace.record(req_id, drafted, accepted, details)
