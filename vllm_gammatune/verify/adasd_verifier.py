"""AdaSD's verification at vLLM's rejection-sampling step.

LOSSY: with relaxation on, a draft token that differs from the target's may be
accepted, so outputs may differ from the target alone. Only the ``adasd``
method turns this on. The verifier serves a policy that ``learns_per_token``
(``policies.base``) through its hooks: ``relaxes_verification``,
``accepts_mismatch``, ``verification_threshold``, ``stop_threshold`` and
``observe_verification``.

Per request of the step (AdaSD paper, Algorithm 1 lines 8-19):

- p_i: the target's distribution at draft position i, exactly what vLLM
  samples from (``target_logits`` after logits processors, temperature,
  top-k and top-p; plain softmax for greedy requests). q_i: the draft's
  distribution at the request's temperature, as the drafter kept it
  (``KeptDraft``: ``drafter.draft_distribution``, or vLLM's own draft probs
  with ``draft_sample_method="probabilistic"``). Both are the distributions
  the two models actually draw from, so the JS distance measures the
  disagreement that matters for the tokens emitted.
- y_i: the target's token at position i: argmax p_i (greedy) or a sample of
  p_i (line 9, with the request's seeded generator when it has one).
- Walk i = 1..w: x_i == y_i accepts; otherwise x_i is still accepted when
  d_JS(p_i, q_i) < T_V (line 11, strict); the first token failing both ends
  acceptance and y_i is emitted there (lines 14-17). When every token is
  accepted, vLLM's bonus token (sampled from p_{w+1}) follows.
- The state is then updated (lines 12-16, 18-19): accepted distances, and
  the rejected token's entropy and distance.

Gen-Only (``adasd_mode="generation"``) keeps vLLM's lossless rejection
sampling and only learns T_G from the entropy of the first rejected token.

The verifier does not know the drafter: it is given the policy, the drafter's
per-request records as ``VerificationRecords`` (what was kept of each draft,
each request's policy state, and where a verified draft's learned state goes)
and a ``VerificationCounters`` sink for the metrics. The step's ``req_ids``
come with each call (``integration.sampling`` hands them over).

The output has vLLM's shape ([num_reqs, max_spec_len + 1], -1 after the last
emitted token), so vLLM's scheduler counts accepted tokens, rolls back the KV
cache of what was not accepted, and reports its spec-decode metrics as usual.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import torch

from vllm.logger import init_logger
from vllm_gammatune.policies import DraftLengthPolicy
from vllm_gammatune.verify.divergences import js_distance
from vllm_gammatune.verify.kept_draft import KeptDraft

logger = init_logger(__name__)

#: vLLM's rejection sampler marks the positions after the last emitted token so
PLACEHOLDER_TOKEN_ID = -1


class VerificationRecords(Protocol):
    """The drafter's per-request records, as the verification sees them."""

    def kept_draft(self, req_id: str) -> KeptDraft | None:
        """What was kept of the request's latest draft (None: nothing)."""

    def policy_state(self, req_id: str) -> Any:
        """The request's policy state (the initial one if it has none yet)."""

    def close_verification(self, req_id: str, learned_state: Any | None) -> None:
        """The request's draft is verified: its kept draft goes; the state
        learned from the verification (None: nothing learned) replaces its own."""


class VerificationCounters(Protocol):
    """Where a step's verification is counted (``telemetry.metrics.StepCounters``)."""

    def record_verification(self, num_relaxed_acceptances: int,
                            generation_thresholds: list[float],
                            verification_thresholds: list[float]) -> None: ...


class AdaSDVerifier:
    """Applies Algorithm 1's verification for one drafter (one worker).

    Args:
        policy: a policy that ``learns_per_token``.
        records: the drafter's per-request records.
        counters: the metrics sink, or None (not the rank-0 worker, or no
            metrics file).
    """

    def __init__(self, policy: DraftLengthPolicy, records: VerificationRecords,
                 counters: VerificationCounters | None):
        assert policy.learns_per_token
        self.policy = policy
        self.records = records
        self.counters = counters

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
        **kwargs,
    ) -> torch.Tensor:
        """vLLM's ``rejection_sample`` (``original``) for the step of ``req_ids``:
        [num_reqs, max_spec_len + 1] emitted tokens, -1 after the last."""
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
        return self._verify(req_ids, standard, draft_token_ids, num_draft_tokens,
                            max_spec_len, target_logits, bonus_token_ids,
                            sampling_metadata)

    def _has_draft(self, req_id: str, n: int) -> bool:
        """Whether what this mode's verification needs was kept for n tokens."""
        kept = self.records.kept_draft(req_id)
        return kept is not None and kept.covers(n, self.policy.relaxes_verification)

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
                # Nothing kept for this draft: verify exactly, learn nothing.
                logger.warning_once("vllm-gammatune: AdaSD verification without "
                                    "draft distributions; exact verification used")
                records.close_verification(req_id, None)
                output[r] = standard[r]
                continue
            kept = records.kept_draft(req_id)
            entropies = kept.entropies[:n]  # [n]
            # T_G; +inf without an entropy stop (Verify-Only)
            thresholds_g.append(policy.stop_threshold(state) if policy.stop_measure
                                else math.inf)
            thresholds_v.append(policy.verification_threshold(state))
            if not policy.relaxes_verification:  # Gen-Only: vLLM's lossless result
                output[r] = standard[r]
                # emitted tokens = accepted drafts + one recovered or bonus token
                accepted = sum(t != PLACEHOLDER_TOKEN_ID for t in standard[r].tolist()) - 1
                rejected = None
                if accepted < n:
                    rejected = (float(entropies[accepted]), 0.0)
                records.close_verification(req_id, policy.observe_verification(
                    state, [0.0] * accepted, rejected))
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
            records.close_verification(req_id, policy.observe_verification(
                state, accepted_distances, rejected))
        if self.counters is not None:
            self.counters.record_verification(relaxed_total, thresholds_g, thresholds_v)
        return output

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
