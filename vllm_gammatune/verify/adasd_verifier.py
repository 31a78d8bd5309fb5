"""AdaSD's verification at vLLM's rejection-sampling step.

LOSSY: with relaxation on, a draft token that differs from the target's may be
accepted, so outputs may differ from the target alone. Only the ``adasd``
method turns this on. The verifier serves a ``RelaxedVerifier``
(``policies.contracts``: ``relaxes_verification``, ``accepts_mismatch``,
``verification_threshold``) whose entropy stop is a ``ThresholdStop``
(T_G); what each verification teaches goes back to the policy as a
``Verification`` with its ``verdicts``, in the next step's observation.

Per request of the step (AdaSD paper, Algorithm 1 lines 8-19):

- p_i: the target's distribution at draft position i, exactly what vLLM
  samples from; q_i: the draft's at the request's temperature, as kept
  (``KeptDraft``; which and why: ``docs/adasd.md``, "Which p and q").
- y_i: the target's token at position i: argmax p_i (greedy) or a sample of
  p_i (line 9, with the request's seeded generator when it has one).
- Walk i = 1..w: x_i == y_i accepts; otherwise x_i is still accepted when
  d_JS(p_i, q_i) < T_V (line 11, strict); the first token failing both ends
  acceptance and y_i is emitted there (lines 14-17). When every token is
  accepted, vLLM's bonus token (sampled from p_{w+1}) follows.
- What the state learns (lines 12-16, 18-19: accepted distances, and the
  rejected token's entropy and distance) is kept as the request's
  ``Verification`` (``take_verifications``) until the drafter's next
  observation hands it to the policy, before its next plan.

Gen-Only (``adasd_mode="generation"``) keeps vLLM's lossless rejection
sampling and only learns T_G from the entropy of the first rejected token.

On the CUDA hot path (``on_device``) the same lines run as tensor operations
(``device_verification``), with the same output and no read on the host;
what the state learns from stays on the device until the drafter reads it
with the step's drafts (``unread_results``, ``read_verifications``). The
policy learns it in the observation before the plan after that: T_G and
T_V lag by one verification more than on the host path.

The verifier does not know the drafter (``VerificationRecords``); the step's
``req_ids`` come with each call (``integration.sampling``); the output has
vLLM's shape, [num_reqs, max_spec_len + 1], -1 after the last emitted token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from vllm.logger import init_logger
from vllm.utils.torch_utils import async_tensor_h2d
from vllm_gammatune.policies import AdaSDPolicy, TokenVerdicts, Verification
from vllm_gammatune.verify.device_verification import (
    ACCEPTED, NUM_FIXED_COLUMNS, PLACEHOLDER_TOKEN_ID, REJECTED, REJECTED_DISTANCE,
    REJECTED_ENTROPY, RELAXED, accepted_counts, emitted_tokens, relaxed_acceptance,
    relaxed_counts, verification_results, verified_tokens)
from vllm_gammatune.verify.divergences import js_distance
from vllm_gammatune.verify.kept_draft import KeptDraft

logger = init_logger(__name__)


@dataclass(frozen=True)
class UnreadVerification:
    """A verification made on the device (the CUDA hot path), until the
    drafter reads its results with the step's drafts."""

    #: (row, req_id) of each request that learns from it, in batch order
    learners: list[tuple[int, str]]
    #: [num_reqs] the draft tokens each request had verified
    num_draft_tokens: list[int]
    #: T_G and T_V in force for each learner (the metrics)
    thresholds_g: list[float]
    thresholds_v: list[float]
    #: [num_reqs, NUM_FIXED_COLUMNS + max_spec_len] (``verification_results``)
    results: torch.Tensor


class VerificationRecords(Protocol):
    """The drafter's per-request records, as the verification sees them."""

    def kept_draft(self, req_id: str) -> KeptDraft | None:
        """What was kept of the request's latest draft (None: nothing)."""

    def policy_state(self, req_id: str) -> Any:
        """The request's policy state (the initial one if it has none yet)."""

    def close_verification(self, req_id: str) -> None:
        """The request's draft is verified: its kept draft goes."""

    def __contains__(self, req_id: str) -> bool:
        """Whether the request still has a record (it has not left)."""


class VerificationCounters(Protocol):
    """Where a step's verification is counted (``telemetry.metrics.StepCounters``)."""

    def record_verification(self, num_relaxed_acceptances: int,
                            generation_thresholds: list[float],
                            verification_thresholds: list[float]) -> None: ...


class AdaSDVerifier:
    """Applies Algorithm 1's verification for one drafter (one worker).

    Args:
        policy: AdaSD's policy.
        records: the drafter's per-request records.
        counters: the metrics sink, or None (not the rank-0 worker, or no
            metrics file).
        on_device: verify with tensor operations, whose results the step's
            one read brings to the host (the CUDA hot path,
            ``device_verification``); off, on the host.
    """

    def __init__(self, policy: AdaSDPolicy, records: VerificationRecords,
                 counters: VerificationCounters | None, on_device: bool = False):
        self.policy = policy
        self.records = records
        self.counters = counters
        self.on_device = on_device
        #: device verifications whose results the drafter has not read yet
        self._unread: list[UnreadVerification] = []
        #: host verifications not handed to the policy yet: (req_id,
        #: num_reqs, num_draft_tokens, verdicts)
        self._verified: list[tuple[str, int, int, TokenVerdicts]] = []

    def take_verifications(self, step: int) -> list[Verification]:
        """The host verifications since the last call, of drafts planned at
        ``step``, for the drafter's observation."""
        verified, self._verified = self._verified, []
        return [_verification(req_id, step, num_reqs, n, verdicts)
                for req_id, num_reqs, n, verdicts in verified]

    def rejection_sample(
        self,
        req_ids: list[str],
        original,
        draft_token_ids: torch.Tensor,  # [num_tokens]
        num_draft_tokens: list[int],
        max_spec_len: int,
        cu_num_draft_tokens: torch.Tensor,  # [num_reqs]
        draft_probs,
        target_logits: torch.Tensor,  # [num_tokens, vocab]
        bonus_token_ids: torch.Tensor,  # [num_reqs, 1]
        sampling_metadata,
        *,
        greedy: Sequence[bool] | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """vLLM's ``rejection_sample`` (``original``) for the step of ``req_ids``:
        [num_reqs, max_spec_len + 1] emitted tokens, -1 after the last.
        ``greedy``: per request (host data), whether it samples greedily;
        needed on the device only, where no temperature is read."""
        # vLLM's lossless result: Gen-Only's verification, and the fallback for
        # a request whose draft distributions are missing. The target logits
        # are cloned because vLLM's rejection sampling may modify them.
        standard = None
        if not self.policy.relaxes_verification or any(
            n and not self._has_draft(req_id, n)
            for req_id, n in zip(req_ids, num_draft_tokens)
        ):
            standard = original(draft_token_ids, num_draft_tokens, max_spec_len,
                                cu_num_draft_tokens, draft_probs, target_logits.clone(),
                                bonus_token_ids, sampling_metadata, **kwargs)
        if self.on_device:
            if greedy is None:
                raise ValueError("the device verification needs each request's "
                                 "greedy flag from the host (greedy=...)")
            return self._verify_on_device(req_ids, greedy, standard, draft_token_ids,
                                          num_draft_tokens, max_spec_len, target_logits,
                                          bonus_token_ids, sampling_metadata.generators)
        return self._verify(req_ids, standard, draft_token_ids, num_draft_tokens,
                            max_spec_len, target_logits, bonus_token_ids,
                            sampling_metadata)

    def _has_draft(self, req_id: str, n: int) -> bool:
        """Whether what this mode's verification needs was kept for n tokens."""
        kept = self.records.kept_draft(req_id)
        return kept is not None and kept.covers(n, self.policy.relaxes_verification)

    def _fall_back(self, req_id: str) -> None:
        """Nothing kept for this draft: it is verified exactly (vLLM's
        result) and teaches nothing."""
        logger.warning_once("vllm-gammatune: AdaSD verification without "
                            "draft distributions; exact verification used")
        self.records.close_verification(req_id)

    def _thresholds(self, state) -> tuple[float, float]:
        """(T_G, T_V) of a request's state; T_G is +inf without an entropy
        stop (Verify-Only)."""
        policy = self.policy
        return (policy.stop_threshold(state) if policy.stop_measure else math.inf,
                policy.verification_threshold(state))

    # -- Algorithm 1, lines 8-19 -----------------------------------------------
    def _verify(self, req_ids, standard, draft_token_ids, num_draft_tokens,
                max_spec_len, target_logits, bonus_token_ids, sampling_metadata):
        """[num_reqs, max_spec_len + 1] emitted tokens, -1 after the last."""
        policy, records = self.policy, self.records
        # [num_reqs, max_spec_len + 1]
        output = torch.full((len(req_ids), max_spec_len + 1), PLACEHOLDER_TOKEN_ID,
                            dtype=torch.int32, device=target_logits.device)
        draft_ids = draft_token_ids.tolist()
        bonus = bonus_token_ids.view(-1).tolist()
        relaxed_total = 0
        thresholds_g, thresholds_v = [], []
        start = 0
        for r, (req_id, n) in enumerate(zip(req_ids, num_draft_tokens)):
            rows = slice(start, start + n)
            start += n
            if n == 0:
                output[r, 0] = bonus[r]
                continue
            state = records.policy_state(req_id)
            if not self._has_draft(req_id, n):
                self._fall_back(req_id)
                output[r] = standard[r]
                continue
            kept = records.kept_draft(req_id)
            entropies = kept.entropies[:n]  # [n]
            threshold_g, threshold_v = self._thresholds(state)
            thresholds_g.append(threshold_g)
            thresholds_v.append(threshold_v)
            if not policy.relaxes_verification:  # Gen-Only: vLLM's lossless result
                output[r] = standard[r]
                # emitted tokens = accepted drafts + one recovered or bonus token
                accepted = sum(t != PLACEHOLDER_TOKEN_ID for t in standard[r].tolist()) - 1
                rejected = None
                if accepted < n:
                    rejected = (float(entropies[accepted]), 0.0)
                self._close(req_id, len(req_ids), n, [0.0] * accepted, rejected)
                continue
            q = kept.distributions[:n].float()  # [n, vocab]
            # [n, vocab]
            p = torch.softmax(target_logits[rows].float(), dim=-1)
            distances = js_distance(p, q).tolist()  # [n]
            targets = self._target_tokens(p, r, sampling_metadata)  # [n]
            accepted_distances, rejected = [], None
            for i in range(n):
                x = draft_ids[rows][i]
                if x == targets[i] or policy.accepts_mismatch(state, distances[i]):
                    relaxed_total += x != targets[i]
                    accepted_distances.append(distances[i])
                    output[r, i] = x
                    continue
                rejected = (float(entropies[i]), distances[i])
                output[r, i] = targets[i]
                break
            else:
                output[r, n] = bonus[r]
            self._close(req_id, len(req_ids), n, accepted_distances, rejected)
        if self.counters is not None:
            self.counters.record_verification(relaxed_total, thresholds_g, thresholds_v)
        return output

    def _close(self, req_id: str, num_reqs: int, num_draft_tokens: int,
               accepted_distances: Sequence[float],
               rejected: tuple[float, float] | None) -> None:
        """The request's draft is verified: what it teaches waits for the
        drafter's next observation."""
        self.records.close_verification(req_id)
        self._verified.append((req_id, num_reqs, num_draft_tokens,
                               TokenVerdicts(tuple(accepted_distances), rejected)))

    @staticmethod
    def _target_tokens(p: torch.Tensor, r: int, sampling_metadata) -> list[int]:
        """y_i: argmax p_i for greedy requests, else a sample of p_i (line 9)."""
        temperature = sampling_metadata.temperature
        greedy = sampling_metadata.all_greedy or (
            temperature is not None and float(temperature[r]) <= 0
        )
        if greedy:
            return p.argmax(dim=-1).tolist()
        generator = sampling_metadata.generators.get(r)
        return torch.multinomial(p, 1, generator=generator).view(-1).tolist()

    # -- the CUDA hot path: Algorithm 1 on the device, learned after the read ----
    def _verify_on_device(self, req_ids, greedy, standard, draft_token_ids,
                          num_draft_tokens, max_spec_len, target_logits, bonus_token_ids,
                          generators):
        """``_verify``'s output, from tensor operations (lines 8-11 and 17);
        what lines 12-16 learn from waits on the device (``unread_results``)."""
        policy, records = self.policy, self.records
        learners, kept, fallback = [], [], []
        thresholds_g, thresholds_v = [], []
        for r, (req_id, n) in enumerate(zip(req_ids, num_draft_tokens)):
            if n == 0:
                continue
            if not self._has_draft(req_id, n):
                self._fall_back(req_id)
                fallback.append(r)
                continue
            learners.append((r, req_id))
            kept.append(records.kept_draft(req_id))
            threshold_g, threshold_v = self._thresholds(records.policy_state(req_id))
            thresholds_g.append(threshold_g)
            thresholds_v.append(threshold_v)
            # the kept draft goes now; the state learns after the read
            # (``read_verifications``)
            records.close_verification(req_id)
        device = target_logits.device
        tokens = verified_tokens(num_draft_tokens, [r for r, _ in learners], max_spec_len,
                                 device)
        # [num_verified_tokens]
        entropies = _joined([k.entropies[:n] for k, (_, _, n) in zip(kept, tokens.segments)],
                            target_logits.new_zeros(0))
        if policy.relaxes_verification:
            # [num_verified_tokens, vocab]
            q = _joined([k.distributions[:n].float()
                         for k, (_, _, n) in zip(kept, tokens.segments)],
                        target_logits.new_zeros((0, target_logits.shape[-1])))
            drafted, targets, distances, accepted = relaxed_acceptance(
                tokens, draft_token_ids, target_logits, q, thresholds_v, greedy, generators)
            num_accepted = accepted_counts(tokens, accepted)  # [num_reqs]
            output = emitted_tokens(tokens, num_accepted, drafted, targets, bonus_token_ids)
            if fallback:
                is_fallback = async_tensor_h2d([r in fallback for r in range(len(req_ids))],
                                               dtype=torch.bool, device=device)
                output = torch.where(is_fallback.unsqueeze(1), standard, output)
            num_relaxed = relaxed_counts(tokens, num_accepted, drafted, targets)
        else:  # Gen-Only: vLLM's lossless result
            output = standard
            # emitted tokens = accepted drafts + one recovered or bonus token
            num_accepted = (standard != PLACEHOLDER_TOKEN_ID).sum(dim=1) - 1
            distances = torch.zeros_like(entropies)
            num_relaxed = torch.zeros_like(num_accepted)
        if learners:
            self._unread.append(UnreadVerification(
                learners, list(num_draft_tokens), thresholds_g, thresholds_v,
                verification_results(tokens, num_accepted, entropies, distances,
                                     num_relaxed)))
        return output

    def unread_results(self) -> list[torch.Tensor]:
        """The results of every device verification not learned from yet,
        oldest first: the drafter reads them with the step's drafts."""
        return [unread.results for unread in self._unread]

    def read_verifications(self, read: Sequence[list[list[float]]],
                           step: int) -> list[Verification]:
        """Lines 12-16 from the host values of ``unread_results`` (in the
        same order), of drafts planned at ``step``: each learner's
        ``Verification``, for the drafter's observation; a request that has
        left learns nothing."""
        unread, self._unread = self._unread, []
        if len(read) != len(unread):
            raise ValueError(f"{len(read)} read results for {len(unread)} verifications")
        verifications = []
        for verification, rows in zip(unread, read):
            num_relaxed = 0
            for r, req_id in verification.learners:
                row = rows[r]
                num_relaxed += int(row[RELAXED])
                if req_id not in self.records:
                    continue
                accepted = int(row[ACCEPTED])
                rejected = ((row[REJECTED_ENTROPY], row[REJECTED_DISTANCE])
                            if row[REJECTED] else None)
                verdicts = TokenVerdicts(
                    tuple(row[NUM_FIXED_COLUMNS:NUM_FIXED_COLUMNS + accepted]), rejected)
                verifications.append(_verification(req_id, step, len(rows),
                                                   verification.num_draft_tokens[r],
                                                   verdicts))
            if self.counters is not None:
                self.counters.record_verification(num_relaxed, verification.thresholds_g,
                                                  verification.thresholds_v)
        return verifications


def _verification(req_id: str, step: int, num_reqs: int, num_draft_tokens: int,
                  verdicts: TokenVerdicts) -> Verification:
    return Verification(req_id, step, num_draft_tokens, len(verdicts.accepted_distances),
                        num_reqs=num_reqs, verdicts=verdicts)


def _joined(parts: list[torch.Tensor], empty: torch.Tensor) -> torch.Tensor:
    """The parts one after the other along the first dimension (``empty``
    without any)."""
    return torch.cat(parts) if parts else empty
