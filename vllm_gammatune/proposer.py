"""The vLLM-facing drafter: vLLM's draft-model proposer with per-request lengths.

``AdaptiveDraftModelProposer`` subclasses vLLM's ``DraftModelProposer``, so
the draft model, its paged KV cache (sharing the target's block tables), the
scheduler and the rejection sampler are vLLM's own. Per step it:

1. observes the last verification of every request that had drafts
   (``prepare_inputs_padded`` receives ``spec_decode_metadata.num_draft_tokens``
   and the per-request count of valid sampled tokens = accepted + 1);
2. asks the policy for each request's next draft length and drafts only as far
   as the longest of them (vLLM's ``propose`` already takes the step's
   ``num_speculative_tokens``, as its batch-size schedule uses it);
3. with a confidence threshold, marks a request as stopped at its first draft
   token whose top probability is below the threshold, and ends the whole
   step as soon as every request has stopped (no further draft forward);
4. returns ``list[list[int]]``, one list per request, of its own length: the
   scheduler reserves and verifies exactly those (as for ngram drafts).

State is a ``RequestStateTable`` keyed by ``req_id``, swept against the
runner's live requests every step (finished and aborted requests leave it;
preempted ones keep their learned window).

Requirements: synchronous scheduling (the plugin's config step turns vLLM's
async scheduling off; see README), padded drafter batch (vLLM's only mode for
draft models), a draft sharing the target's vocabulary.
"""

from __future__ import annotations

import time

import torch

from vllm.logger import init_logger
from vllm.v1.spec_decode.draft_model import DraftModelProposer
from vllm_gammatune.config import plugin_section, settings_from_additional_config
from vllm_gammatune.metrics import StepCounters
from vllm_gammatune.policies import BatchView
from vllm_gammatune.state import RequestStateTable

logger = init_logger(__name__)


class _EveryRequestStopped(Exception):
    """Raised inside vLLM's draft loop once no request drafts further."""


class _DraftStep:
    """Book-keeping of one ``propose`` call (one engine step)."""

    def __init__(self, planned: list[int], device: torch.device, threshold):
        self.num_steps = max(planned)
        self.threshold = threshold
        # [batch]
        self.planned = torch.tensor(planned, dtype=torch.int32, device=device)
        # [batch] final number of draft tokens per request
        self.lengths = self.planned.clone()
        # [batch] True once the request drafts no further
        self.stopped = torch.zeros_like(self.planned, dtype=torch.bool)
        # [batch] True where the request was stopped by confidence
        self.confidence_stopped = torch.zeros_like(self.stopped)
        self.token_ids: list[torch.Tensor] = []  # num_steps x [batch]
        self.probs: list[torch.Tensor] = []  # num_steps x [batch, vocab]
        self.top_prob: torch.Tensor | None = None  # [batch] of the current step

    def record(self, token_ids: torch.Tensor, probs: torch.Tensor | None) -> bool:
        """Add one draft position; return True when every request has stopped."""
        self.token_ids.append(token_ids)
        if probs is not None:
            self.probs.append(probs)
        position = len(self.token_ids)  # tokens drafted so far, 1-based
        reached_plan = self.planned <= position
        if self.threshold is not None and self.top_prob is not None:
            low = (self.top_prob < self.threshold) & ~self.stopped & ~reached_plan
            self.lengths = torch.where(
                low, torch.full_like(self.lengths, position), self.lengths
            )
            self.confidence_stopped |= low
            self.stopped |= low
        self.stopped |= reached_plan
        self.top_prob = None
        if position >= self.num_steps or self.threshold is None:
            return False
        return bool(self.stopped.all())


class AdaptiveDraftModelProposer(DraftModelProposer):
    """vLLM's DraftModelProposer, drafting each request's own length."""

    def __init__(self, vllm_config, device, runner=None):
        super().__init__(vllm_config=vllm_config, device=device, runner=runner)
        settings = settings_from_additional_config(vllm_config.additional_config)
        assert settings is not None, "AdaptiveDraftModelProposer without settings"
        self.settings = settings
        self.policy = settings.make_policy()
        self.request_states = RequestStateTable(self.policy)
        self._runner = runner
        self._step: _DraftStep | None = None
        # (num_draft_tokens per request, [num_reqs] valid sampled counts)
        self._pending_verification: tuple[list[int], torch.Tensor] | None = None
        self._counters: StepCounters | None = None
        metrics_path = plugin_section(vllm_config.additional_config).get("metrics_path")
        if metrics_path and vllm_config.parallel_config.rank == 0:
            try:
                self._counters = StepCounters.attach(
                    metrics_path, settings.num_speculative_tokens
                )
            except OSError as exc:  # another node: metrics stay vLLM's only
                logger.warning("vllm-gammatune: metrics file not reachable: %s", exc)
        #: seconds spent in the plugin's own code (policy, book-keeping)
        self.policy_seconds = 0.0
        logger.info(
            "vllm-gammatune: drafting with method=%s %s",
            settings.method,
            settings.to_dict(),
        )

    # -- 1. observe the verification of the previous drafts -----------------
    def prepare_inputs_padded(
        self, common_attn_metadata, spec_decode_metadata, valid_sampled_tokens_count
    ):
        # valid_sampled_tokens_count: [num_reqs] accepted drafts + 1 (0 if discarded)
        self._pending_verification = (
            list(spec_decode_metadata.num_draft_tokens),
            valid_sampled_tokens_count,
        )
        return super().prepare_inputs_padded(
            common_attn_metadata, spec_decode_metadata, valid_sampled_tokens_count
        )

    def _observe_verification(self, req_ids: list[str], batch: BatchView) -> None:
        if self._pending_verification is None:
            return
        num_draft_tokens, valid_counts = self._pending_verification
        self._pending_verification = None
        valid = valid_counts.tolist()
        for req_id, drafted, num_valid in zip(req_ids, num_draft_tokens, valid):
            if drafted <= 0 or num_valid <= 0:
                continue
            accepted = min(drafted, num_valid - 1)
            state = self.request_states.get(req_id)
            self.request_states.set(
                req_id, self.policy.observe(state, drafted, accepted, batch)
            )

    # -- 2-4. plan, draft, cut ---------------------------------------------
    def propose(self, num_speculative_tokens, *args, **kwargs):
        runner = self._runner
        if runner is None or num_speculative_tokens == 0:
            return super().propose(num_speculative_tokens, *args, **kwargs)
        start = time.perf_counter()
        req_ids = list(runner.input_batch.req_ids)
        batch = BatchView(batch_size=len(req_ids))
        self.request_states.forget_missing(runner.requests)
        self._observe_verification(req_ids, batch)
        planned = [
            min(
                num_speculative_tokens,
                self.policy.next_num_draft_tokens(self.request_states.get(r), batch),
            )
            for r in req_ids
        ]
        step = _DraftStep(planned, self.device, self.policy.confidence_threshold)
        self._step = step
        self.policy_seconds += time.perf_counter() - start
        try:
            super().propose(step.num_steps, *args, **kwargs)
        except _EveryRequestStopped:
            pass
        finally:
            self._step = None
        start = time.perf_counter()
        # [batch, tokens drafted this step]
        draft_token_ids = torch.stack(step.token_ids, dim=1)
        if step.probs:
            # [batch, tokens drafted this step, vocab], read by the rejection sampler
            self._last_draft_probs = torch.stack(step.probs, dim=1).contiguous()
        lengths = step.lengths.tolist()
        rows = draft_token_ids.tolist()
        drafts = [row[:n] for row, n in zip(rows, lengths)]
        self._record_metrics(drafts, planned, step)
        self.policy_seconds += time.perf_counter() - start
        return drafts

    def _record_metrics(self, drafts, planned, step: _DraftStep) -> None:
        if self._counters is None:
            return
        num_reqs = len(drafts)
        discarded = self._runner.discard_request_mask.np[:num_reqs]
        kept = [i for i in range(num_reqs) if not discarded[i]]
        stops = step.confidence_stopped.tolist()
        self._counters.record_step(
            [len(drafts[i]) for i in kept],
            sum(planned[i] for i in kept),
            sum(1 for i in kept if stops[i]),
            len(self.request_states),
            num_draft_forward_passes=len(step.token_ids),
        )

    # -- hooks into vLLM's draft loop -----------------------------------------
    def _greedy_sample(self, hidden_states: torch.Tensor) -> torch.Tensor:
        step = self._step
        if (
            step is None
            or step.threshold is None
            or self.use_local_argmax_reduction
            or self.use_heterogeneous_vocab
        ):
            return super()._greedy_sample(hidden_states)
        # [batch, vocab]
        logits = self.model.compute_logits(hidden_states).float()
        step.top_prob = torch.exp(
            logits.max(dim=-1).values - torch.logsumexp(logits, dim=-1)
        )
        return logits.argmax(dim=-1)

    def _sample_from_logits(self, logits, sampling_metadata):
        token_ids, probs = super()._sample_from_logits(logits, sampling_metadata)
        step = self._step
        if step is not None and step.threshold is not None:
            if probs is not None:  # [batch, vocab], after temperature
                step.top_prob = probs.max(dim=-1).values
            else:
                step.top_prob = torch.softmax(logits.float(), dim=-1).max(dim=-1).values
        return token_ids, probs

    def _sample_draft_tokens(self, hidden_states, sampling_metadata):
        token_ids, probs = super()._sample_draft_tokens(hidden_states, sampling_metadata)
        step = self._step
        if step is not None and step.record(token_ids, probs):
            raise _EveryRequestStopped
        return token_ids, probs
