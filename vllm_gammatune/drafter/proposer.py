"""The vLLM-facing drafter: vLLM's draft-model proposer with per-request lengths.

``AdaptiveDraftModelProposer`` subclasses vLLM's ``DraftModelProposer``, so
the draft model, its paged KV cache (sharing the target's block tables), the
scheduler and the rejection sampler are vLLM's own. One step:

1. observe: what reached the host (``verification_inbox``) and the timer's
   timings (``step_timing``) go to the policy as one ``StepObservation``;
2. plan: the policy's lengths, capped by the step's
   ``num_speculative_tokens``; every tensor-parallel rank drafts rank 0's
   plan (``tp_agreement``); the step's book-keeping (``draft_step``);
3. catch up (``draft_kv.catch_up``), or skip the draft model for a step
   where no request drafts;
4. draft: vLLM's own draft loop, as far as the longest plan, each request
   stopping where its per-token stop ends it;
5. cut: one list per request (on the hot path every pass's token, padded
   to K, ``uniform_shape``); 6. record: the step's metrics (``step_metrics``).

On the CUDA hot path (``hot_path``) the loop runs every planned pass and
the device is read once a step: after the passes (``DraftStep.read_back``:
the drafts with the last verification), or with the n-gram front before
the plan (the verification with the sampled tokens; the drafts stay on
the device).

The drafter asks nothing of a policy but its contracts (``policies.base``,
``policies.contracts``), each recognised by type; vLLM's side asks nothing
of the drafter but ``contract.PluginDrafter``. Requirements: synchronous
scheduling (docs/cuda.md), a draft sharing the target's vocabulary.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Collection

import torch

from vllm.logger import init_logger
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.sample.metadata import SamplingMetadata
from vllm.v1.spec_decode.draft_model import DraftModelProposer
from vllm_gammatune.draft_kv.catch_up import DraftCatchUp
from vllm_gammatune.draft_kv.holes import DraftKVHoles
from vllm_gammatune.drafter.contract import PluginDrafter
from vllm_gammatune.drafter.draft_distribution import draft_distribution, proposed_token_probs
from vllm_gammatune.drafter.draft_step import DraftStep, EveryRequestStopped, plan_draft_step
from vllm_gammatune.drafter.hot_path import read_on_host, takes_hot_path
from vllm_gammatune.drafter.ngram_front import NgramFront
from vllm_gammatune.drafter.observations import deliver, trace_verifications
from vllm_gammatune.drafter.request_records import RequestRecords
from vllm_gammatune.drafter.step_metrics import attach_step_metrics
from vllm_gammatune.drafter.step_timing import StepTimer
from vllm_gammatune.drafter.tp_agreement import same_plan_on_every_rank
from vllm_gammatune.drafter.uniform_shape import UniformShape
from vllm_gammatune.drafter.verification_inbox import VerificationInbox
from vllm_gammatune.methods import settings_from_additional_config
from vllm_gammatune.methods.drafters import DRAFTER_NGRAM_THEN_MODEL
from vllm_gammatune.policies import (
    BatchView,
    CostObserver,
    DrafterTraits,
    ExplainsSteps,
    RelaxedVerifier,
)
from vllm_gammatune.telemetry import trace
from vllm_gammatune.telemetry.metrics import StepCounters
from vllm_gammatune.verify.adasd_verifier import AdaSDVerifier

logger = init_logger(__name__)


class AdaptiveDraftModelProposer(DraftModelProposer, PluginDrafter):
    """vLLM's DraftModelProposer, drafting each request's own length."""

    def __init__(self, vllm_config, device, runner=None):
        super().__init__(vllm_config=vllm_config, device=device, runner=runner)
        settings = settings_from_additional_config(vllm_config.additional_config)
        assert settings is not None, "AdaptiveDraftModelProposer without settings"
        self.settings = settings
        self.policy = policy = settings.make_policy()
        #: the CUDA hot path (``hot_path``)
        self.hot_path = takes_hot_path(self.device)
        uses_front = settings.drafter == DRAFTER_NGRAM_THEN_MODEL
        #: a policy that plans from measured costs: the timer, and skipping
        #: the draft model (catching it up before a request drafts again)
        plans_from_costs = isinstance(policy, CostObserver)
        if self.hot_path and plans_from_costs:
            policy.adapt_to_drafter(DrafterTraits(runs_every_planned_pass=True))
        self._runner = runner
        #: where the draft's KV cache lacks positions (a skipped step's)
        self.draft_kv_holes = DraftKVHoles()
        #: one record per request; its sweep also drops the holes' and trace's
        self.records = RequestRecords(
            policy, also_forget=(self.draft_kv_holes.forget_missing, trace.forget_missing))
        #: the n-gram lookup ahead of the draft model, or None (``ngram_front``)
        self._front = (NgramFront.for_config(vllm_config, settings.drafter_options,
                                             policy, self.records)
                       if uses_front else None)
        self._step: DraftStep | None = None  # while vLLM's draft loop runs
        self._metrics = attach_step_metrics(vllm_config, settings.num_speculative_tokens)
        #: the per-token verification at the rejection-sampling step, or None
        self.adasd_verifier = (AdaSDVerifier(policy, self.records, self.counters,
                                             on_device=self.hot_path)
                               if isinstance(policy, RelaxedVerifier) else None)
        self._inbox = VerificationInbox(
            self.hot_path, self.adasd_verifier, self._front,
            functools.partial(trace_verifications, policy, self.records))
        self._catch_up = DraftCatchUp(self.draft_kv_holes) if plans_from_costs else None
        #: the hot path pads each draft to the step's K (``uniform_shape``);
        #: AdaSD verifies its own lengths token by token
        self._uniform = (UniformShape() if self.hot_path and self.adasd_verifier is None
                         else None)
        self._timer = StepTimer(self.device) if plans_from_costs else None
        #: seconds in the plugin's own code (``vllm:gammatune_plugin_time_us``)
        self.policy_seconds = 0.0
        logger.info("vllm-gammatune: drafting with method=%s %s", settings.method,
                    settings.to_dict())

    # -- what the integration asks of the drafter (``contract``) -------------------
    @property
    def counters(self) -> StepCounters | None:
        return None if self._metrics is None else self._metrics.counters

    def verified_draft_lengths(self, req_ids: list[str],
                               num_draft_tokens: list[int]) -> list[int] | None:
        return self._uniform and self._uniform.verified_lengths(req_ids, num_draft_tokens)

    def forget_finished(self, live_req_ids: Collection[str]) -> None:
        """Drop the records of requests that are not live, and report how
        many requests the drafter still tracks."""
        self.records.forget_missing(live_req_ids)
        if self.counters is not None:
            self.counters.set_tracked_requests(len(self.records))

    # -- one step ----------------------------------------------------------------
    def propose(
        self,
        num_speculative_tokens: int,
        # [num_tokens]
        target_token_ids: torch.Tensor,
        # [num_tokens] or [3, num_tokens] when M-RoPE is enabled
        target_positions: torch.Tensor,
        # [num_tokens, hidden_size]
        target_hidden_states: torch.Tensor,
        # [num_reqs]
        next_token_ids: torch.Tensor,
        token_indices_to_sample: torch.Tensor | None,
        common_attn_metadata: CommonAttentionMetadata,
        sampling_metadata: SamplingMetadata,
        mm_embed_inputs: tuple[list[torch.Tensor], torch.Tensor] | None = None,
        num_rejected_tokens_gpu: torch.Tensor | None = None,
        slot_mappings: dict[str, torch.Tensor] | list[dict[str, torch.Tensor]] | None = None,
    ) -> list[list[int]] | torch.Tensor:
        vllm_inputs = dict(
            target_token_ids=target_token_ids, target_positions=target_positions,
            target_hidden_states=target_hidden_states, next_token_ids=next_token_ids,
            token_indices_to_sample=token_indices_to_sample,
            common_attn_metadata=common_attn_metadata, sampling_metadata=sampling_metadata,
            mm_embed_inputs=mm_embed_inputs, num_rejected_tokens_gpu=num_rejected_tokens_gpu,
            slot_mappings=slot_mappings)
        runner = self._runner
        if runner is None or num_speculative_tokens == 0:
            if self._timer is not None:
                self._timer.forget_last_step()
            if self._front is not None:
                self._front.forget_step()
            return super().propose(num_speculative_tokens, **vllm_inputs)
        start = time.perf_counter()
        req_ids = list(runner.input_batch.req_ids)
        self.records.forget_missing(runner.requests)
        if self._timer is not None:
            self._timer.begin_step(self._inbox.steps.next)
        # 1. observe
        collected = self._inbox.collect(req_ids, self.counters, next_token_ids)
        verifications, unread = collected.verifications, collected.unread
        batch, decode_only = self._batch_view(req_ids, num_speculative_tokens,
                                              common_attn_metadata)
        offers = None
        if self._front is not None:
            offers, scored = self._front.look_up(runner, req_ids, num_speculative_tokens,
                                                 collected.accepted, collected.next_token_ids,
                                                 self._inbox.steps.drafted_at)
            verifications += scored
        deliver(self.policy, self.records, self._inbox.steps.next, verifications,
                () if self._timer is None else
                self._timer.take(self._inbox.verified_through()))
        # 2. plan
        free = None
        if offers is not None:
            free, batch = self._front.choose_for_step(req_ids, offers, batch,
                                                      num_speculative_tokens)
        step = self._plan(req_ids, batch, num_speculative_tokens)
        self.policy_seconds += time.perf_counter() - start
        if step.num_passes == 0:
            return self._skip_draft_model(req_ids, step, num_speculative_tokens, unread, free)
        # 3. catch up
        num_caught_up = 0
        if self._catch_up is not None:
            num_caught_up = self._catch_up.catch_up(
                self, common_attn_metadata, runner.input_batch.token_ids_cpu,
                step.planned_lengths, batch.catch_up_tokens, self._timer)
        # 4. draft
        self._draft(step, num_reqs=len(req_ids), decode_only=decode_only,
                    vllm_inputs=vllm_inputs)
        drafts, lengths = self._cut_and_keep(req_ids, step, num_speculative_tokens, unread,
                                             free)
        self._record_step(lengths, step, num_catch_up_tokens=num_caught_up)
        if self._uniform is None or isinstance(drafts, torch.Tensor):
            return drafts
        # the shape vLLM's CUDA graphs replay (``uniform_shape``)
        drafts, self._last_draft_probs = self._uniform.pad(
            req_ids, drafts, step.loop_tokens(), num_speculative_tokens, self._last_draft_probs)
        return drafts

    # -- 1. observe ---------------------------------------------------------------
    def prepare_inputs_padded(self, common_attn_metadata, spec_decode_metadata,
                              valid_sampled_tokens_count):
        # valid_sampled_tokens_count: [num_reqs] accepted drafts + 1 (0 if discarded)
        num_draft_tokens = list(spec_decode_metadata.num_draft_tokens)
        verified = self.verified_draft_lengths(self._runner.input_batch.req_ids,
                                               num_draft_tokens)
        self._inbox.hand_over(verified or num_draft_tokens, valid_sampled_tokens_count)
        return super().prepare_inputs_padded(common_attn_metadata, spec_decode_metadata,
                                             valid_sampled_tokens_count)

    # -- 2. plan ------------------------------------------------------------------
    def _batch_view(self, req_ids: list[str], num_speculative_tokens: int,
                    cad: CommonAttentionMetadata):
        """What the policy may know of this step (``BatchView``); whether it decodes only."""
        if self._catch_up is None:
            return BatchView(len(req_ids)), None
        batch = self._catch_up.batch_view(self._runner, req_ids, num_speculative_tokens,
                                          cad.num_actual_tokens)
        # Prefill chunks (long, compute-bound) say little about verifying a few
        # draft tokens, what the decision is about: the timer fits decode steps only.
        decode_only = not batch.has_prefill
        self._timer.on_plan(cad.num_actual_tokens, len(req_ids), decode_only)
        return batch, decode_only

    def _plan(self, req_ids: list[str], batch: BatchView,
              num_speculative_tokens: int) -> DraftStep:
        policy = self.policy
        states = [self.records.policy_states[r] for r in req_ids]
        planned = [min(num_speculative_tokens, k) for k in policy.plan_batch(states, batch)]
        if isinstance(policy, CostObserver):
            planned = same_plan_on_every_rank(planned)
        self._inbox.steps.planned()
        tracing = trace.writer() is not None
        if tracing and isinstance(policy, ExplainsSteps):  # VLLM_GAMMATUNE_TRACE only
            decision = policy.last_decision
            if decision is not None:
                trace.record_step(decision)
        keeps = None if self._uniform is None else [  # but at 0 with a KV hole
            k > 0 or self.draft_kv_holes.hole_start(r) is None for r, k in zip(req_ids, planned)]
        return plan_draft_step(policy, states, planned, self.device, keep_token_probs=tracing,
                               early_exit=not self.hot_path, keeps_every_pass=keeps)

    # -- 3. skip the draft model ------------------------------------------------------
    def _skip_draft_model(self, req_ids: list[str], step: DraftStep, k: int, unread=None,
                          free=None) -> list[list[int]]:
        """No request drafts with the draft model: it does not run this step
        (the hot path reads the last verification, if still unread). The
        step's drafts are the free ones (``free``: offers and lengths), if
        any; on the hot path, where the policy finds verification next to
        free, padded to ``k`` with certain fillers (``uniform_shape``)."""
        assert self._catch_up is not None, "only a CostObserver plans 0 for a whole step"
        if unread is not None and unread.valid_counts is not None:
            self._inbox.read(req_ids, unread,
                             read_on_host(unread.valid_counts[:len(req_ids)]), [])
        self._catch_up.on_skipped()
        if self._uniform is not None:
            self._uniform.clear()
        # vLLM's rejection sampler takes drafts without probabilities as
        # proposed with certainty, as a lookup's are
        self._last_draft_probs = None
        drafts = [[] for _ in req_ids]
        if free is not None:
            drafts = NgramFront.merge(drafts, *free)
        # with no draft at all, the engine core need not fetch any (draft_handoff)
        self.skipped_this_step = not any(drafts)
        self._record_step(list(map(len, drafts)), step, skipped=True)
        if self._uniform is not None and self.policy.pads_skipped_step(len(req_ids), k):
            self.skipped_this_step = False
            drafts, _ = self._uniform.pad(req_ids, drafts, drafts, k, None)
        return drafts

    # -- 4. draft: vLLM's draft loop ------------------------------------------------
    def _draft(self, step: DraftStep, num_reqs: int, decode_only: bool,
               vllm_inputs: dict) -> None:
        """Run vLLM's draft loop for ``step.num_passes`` passes at most."""
        if self._timer is not None:
            # the first pass runs over the step's target tokens: over a
            # prefill chunk it is no decode-regime sample (``_batch_view``) but a
            # prefill-like one, priced like a catch-up; later passes are
            # decode passes
            num_tokens = vllm_inputs["common_attn_metadata"].num_actual_tokens
            self._timer.start_passes(num_tokens + num_reqs,
                                     first_pass_is_prefill=not decode_only)
        self._step = step
        try:
            super().propose(step.num_passes, **vllm_inputs)
        except EveryRequestStopped:
            pass
        finally:
            self._step = None
            if self._timer is not None:
                self._timer.end_passes()

    def _sample_draft_tokens(self, hidden_states, sampling_metadata):
        """vLLM's draft loop calls this once per draft pass: the step's
        book-keeping sees every pass, and ends the loop when every request
        has stopped."""
        step = self._step
        if step is None:
            return super()._sample_draft_tokens(hidden_states, sampling_metadata)
        if self._timer is not None:  # time the passes
            self._timer.on_pass(hidden_states.shape[0])
        token_probs = None
        if not (step.needs_distribution or step.needs_token_probs):
            token_ids, probs = super()._sample_draft_tokens(hidden_states, sampling_metadata)
            distribution = None
        else:
            # [num_reqs, vocab]
            logits = self.model.compute_logits(hidden_states)
            if self._enable_probabilistic_draft_probs and not sampling_metadata.all_greedy:
                token_ids, probs = self._sample_from_logits(logits, sampling_metadata)
            else:
                token_ids, probs = logits.argmax(dim=-1), None
            distribution = None
            if step.needs_distribution:
                distribution = probs if probs is not None else draft_distribution(
                    logits, sampling_metadata)
        # the plugin's own time: the token probabilities and every decision
        started = time.perf_counter()
        if step.needs_token_probs:
            # [num_reqs]; read from the distribution where one was built
            token_probs = (proposed_token_probs(logits, token_ids, sampling_metadata)
                           if distribution is None else
                           distribution.gather(-1, token_ids.long().unsqueeze(-1)).squeeze(-1))
        every_request_stopped = step.record(token_ids, probs, distribution, token_probs)
        self.policy_seconds += time.perf_counter() - started
        if every_request_stopped:
            raise EveryRequestStopped
        return token_ids, probs

    # -- 5. cut, and keep what verification and the trace need -------------------
    def _cut_and_keep(self, req_ids: list[str], step: DraftStep, k: int, unread=None,
                      free=None) -> tuple[list[list[int]] | torch.Tensor, list[int]]:
        """(the drafts, [num_reqs] each one's length). Read the step back
        (with the last verification, on the hot path), cut each draft to its
        length, put the free drafts (``free``: offers and lengths) in place,
        and keep what its verification and the trace will need. The hot path
        with the n-gram front read the device before the plan: its drafts stay
        there, padded to ``k`` (``NgramFront.on_device``), and are read only
        for a trace of token probabilities (``VLLM_GAMMATUNE_TRACE``)."""
        start = time.perf_counter()
        if self._timer is not None:
            self._timer.passes_run(len(step.token_ids))
        if self._front is not None and self._uniform is not None:
            drafts, self._last_draft_probs, lengths = self._front.on_device(
                self._uniform, req_ids, step, free, k)
        else:
            verifier = self.adasd_verifier
            # AdaSD's device verifications (hot path), read with the step
            extra = [] if verifier is None else verifier.unread_results()
            read = step.read_back(None if unread is None else unread.valid_counts, extra=extra)
            if unread is not None:
                self._inbox.read(req_ids, unread, read.valid_counts, read.extra)
            drafts = step.drafts()
            draft_probs = step.draft_probs()
            if free is not None and any(free[1]):
                drafts = NgramFront.merge(drafts, *free)
                if draft_probs is not None:
                    draft_probs = NgramFront.probs_with_free_rows(draft_probs, drafts, free[1])
            if draft_probs is not None:  # read by vLLM's rejection sampler
                self._last_draft_probs = draft_probs
            lengths = list(map(len, drafts))
        if step.keep_entropies:
            for req_id, kept in zip(req_ids, step.kept_drafts()):
                self.records.keep_draft(req_id, kept)
        if step.token_probs:
            for req_id, token_probs in zip(req_ids, step.traced_token_probs()):
                self.records.keep_traced_token_probs(req_id, token_probs)
        self.policy_seconds += time.perf_counter() - start
        return drafts, lengths

    # -- 6. record --------------------------------------------------------------------
    def _record_step(self, lengths: list[int], step: DraftStep, skipped: bool = False,
                     num_catch_up_tokens: int = 0) -> None:
        """Count the step (``lengths``: [num_reqs] the draft tokens each
        request hands over for verification)."""
        if self._metrics is not None:
            discarded = self._runner.discard_request_mask.np[:len(lengths)]
            self._metrics.record_step(lengths, step, discarded, len(self.records),
                                      self.policy_seconds, skipped=skipped,
                                      num_catch_up_tokens=num_catch_up_tokens)
        if self._timer is not None:
            self._timer.on_step_end()

