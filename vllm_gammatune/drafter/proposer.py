"""The vLLM-facing drafter: vLLM's draft-model proposer with per-request lengths.

``AdaptiveDraftModelProposer`` subclasses vLLM's ``DraftModelProposer``, so
the draft model, its paged KV cache (sharing the target's block tables), the
scheduler and the rejection sampler are vLLM's own. It orchestrates one
step; each part lives in its own module:

1. observe the last verification of every request that had drafts
   (``prepare_inputs_padded`` receives ``spec_decode_metadata.num_draft_tokens``
   and the per-request count of valid sampled tokens = accepted + 1), into
   the request's record (``request_records``);
2. plan: ask the policy for each request's next draft length, capped by the
   step's ``num_speculative_tokens`` (vLLM's batch-size schedule); every
   tensor-parallel rank drafts rank 0's plan (``tp_agreement``); the step's
   book-keeping follows (``draft_step.DraftStep``);
3. catch up: a request that drafts after steps where the draft model was
   skipped first runs the draft over the positions it missed
   (``draft_kv.catch_up``); a step where no request drafts runs no draft
   model at all;
4. draft: vLLM's own draft loop, as far as the longest plan; with a
   per-token stop (a confidence threshold, AdaSD's entropy threshold, or the
   policy's own decision after each pass from the draft's probability of
   each new token, ``draft_on``) a request's draft ends where it stops, and
   the loop ends as soon as every request has stopped
   (``EveryRequestStopped``: no further draft forward);
5. cut: ``list[list[int]]``, one list per request, of its own length: the
   scheduler reserves and verifies exactly those (as for ngram drafts); what
   AdaSD's verification and the trace need of each draft goes into the
   request's record;
6. record: the step's metrics (``step_metrics``) and, for a policy that plans
   from measured costs, its timing (``step_timing``).

That is the host path. On the CUDA hot path (``hot_path``) step 1 moves
after step 4: nothing is read before the draft passes are launched, the loop
runs every planned pass (threshold stops stay on the device, a per-token rule
is applied after it), and one read (``DraftStep.read_back``) brings the
drafts together with the verification the policy then learns from, one plan
late.

The proposer asks nothing of a policy but the hooks of ``DraftLengthPolicy``
(``policies.base``): its per-token stop (``stop_measure``), whether it learns
token by token at the rejection sampler (``learns_per_token``, AdaSD:
``verify.adasd_verifier``), whether it reads measured step costs
(``times_steps``) and whether it may skip the draft model for a whole step
(``skips_drafts``).

Requirements: synchronous scheduling (the plugin's config step turns vLLM's
async scheduling off; see docs/cuda.md), padded drafter batch (vLLM's only mode for
draft models), a draft sharing the target's vocabulary.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection

from vllm.logger import init_logger
from vllm.v1.spec_decode.draft_model import DraftModelProposer
from vllm_gammatune.draft_kv.catch_up import DraftCatchUp, step_positions
from vllm_gammatune.draft_kv.holes import DraftKVHoles
from vllm_gammatune.drafter.draft_distribution import draft_distribution, proposed_token_probs
from vllm_gammatune.drafter.draft_step import DraftStep, EveryRequestStopped, plan_draft_step
from vllm_gammatune.drafter.hot_path import read_on_host, uses_cuda_hot_path
from vllm_gammatune.drafter.ngram_front import NgramFront
from vllm_gammatune.drafter.observations import (
    accepted_draft_tokens,
    observe_verifications,
)
from vllm_gammatune.drafter.request_records import RequestRecords
from vllm_gammatune.drafter.step_metrics import attach_step_metrics
from vllm_gammatune.drafter.step_timing import StepTimer
from vllm_gammatune.drafter.tp_agreement import same_plan_on_every_rank
from vllm_gammatune.methods import settings_from_additional_config
from vllm_gammatune.methods.drafters import DRAFTER_NGRAM_THEN_MODEL
from vllm_gammatune.policies import BatchView
from vllm_gammatune.telemetry import trace
from vllm_gammatune.telemetry.metrics import StepCounters
from vllm_gammatune.verify.adasd_verifier import AdaSDVerifier

logger = init_logger(__name__)


class AdaptiveDraftModelProposer(DraftModelProposer):
    """vLLM's DraftModelProposer, drafting each request's own length."""

    #: a step where no request has draft tokens is sampled without vLLM's
    #: rejection sampler (``integration.sampling.sample_step``)
    samples_draftless_steps_plainly = True

    def __init__(self, vllm_config, device, runner=None):
        super().__init__(vllm_config=vllm_config, device=device, runner=runner)
        settings = settings_from_additional_config(vllm_config.additional_config)
        assert settings is not None, "AdaptiveDraftModelProposer without settings"
        self.settings = settings
        self.policy = settings.make_policy()
        #: the CUDA hot path: one read per step, after the draft passes
        #: (``hot_path``); off, the host path with early exits. The n-gram
        #: front reads the sampled tokens before it plans: the host path.
        uses_front = settings.drafter == DRAFTER_NGRAM_THEN_MODEL
        self.hot_path = uses_cuda_hot_path(self.device) and not uses_front
        if self.hot_path:
            self.policy.adapt_to_drafter(runs_every_planned_pass=True, observation_lag=1)
        self._runner = runner
        #: where the draft's KV cache lacks positions (``skips_drafts``)
        self.draft_kv_holes = DraftKVHoles()
        #: one record per request; its sweep also drops the holes' and the
        #: trace's per-request entries
        self.records = RequestRecords(
            self.policy, also_forget=(self.draft_kv_holes.forget_missing,
                                      trace.forget_missing))
        #: the n-gram lookup ahead of the draft model, or None (``ngram_front``)
        self._front = (NgramFront.for_config(vllm_config, settings.drafter_options,
                                             self.policy, self.records)
                       if uses_front else None)
        #: the step being drafted, while vLLM's draft loop runs
        self._step: DraftStep | None = None
        # (num_draft_tokens per request, [num_reqs] valid sampled counts)
        self._pending_verification = None
        self._metrics = attach_step_metrics(vllm_config, settings.num_speculative_tokens,
                                            self.policy)
        #: the per-token verification at the rejection-sampling step, or None
        self.adasd_verifier = (AdaSDVerifier(self.policy, self.records, self.counters,
                                             on_device=self.hot_path)
                               if self.policy.learns_per_token else None)
        #: set when this step skipped the draft model (no request has draft
        #: tokens): the engine core then does not fetch them (``draft_handoff``)
        self.skipped_this_step = False
        #: skipping the draft model and catching it up (``skips_drafts``)
        self._catch_up = (DraftCatchUp(self.draft_kv_holes) if self.policy.skips_drafts
                          else None)
        #: the step costs the policy reads (``times_steps``)
        self._timer = StepTimer(self.policy, self.device) if self.policy.times_steps else None
        #: seconds spent in the plugin's own code per engine lifetime (planning,
        #: observing, cutting drafts; not the draft model), exported as
        #: ``vllm:gammatune_plugin_time_us``
        self.policy_seconds = 0.0
        logger.info(
            "vllm-gammatune: drafting with method=%s %s",
            settings.method,
            settings.to_dict(),
        )

    # -- what the integration asks of the drafter ------------------------------
    @property
    def counters(self) -> StepCounters | None:
        """The engine's metrics file (rank-0 worker only), or None."""
        return None if self._metrics is None else self._metrics.counters

    def forget_finished(self, live_req_ids: Collection[str]) -> None:
        """Drop the records of requests that are not live, and report how
        many requests the drafter still tracks."""
        self.records.forget_missing(live_req_ids)
        if self.counters is not None:
            self.counters.set_tracked_requests(len(self.records))

    # -- one step ----------------------------------------------------------------
    def propose(self, num_speculative_tokens, *args, **kwargs):
        runner = self._runner
        if runner is None or num_speculative_tokens == 0:
            if self._timer is not None:
                self._timer.forget_last_step()
            if self._front is not None:
                self._front.forget_step()
            return super().propose(num_speculative_tokens, *args, **kwargs)
        start = time.perf_counter()
        req_ids = list(runner.input_batch.req_ids)
        self.records.forget_missing(runner.requests)
        verification, self._pending_verification = self._pending_verification, None
        if self.policy.learns_per_token:
            verification = None  # it learns at the rejection sampler instead
        accepted = None
        if not self.hot_path and verification is not None:
            # the host path reads the last verification before it plans
            num_draft_tokens, valid_counts = verification[0], verification[1].tolist()
            if self._front is not None:
                accepted = [accepted_draft_tokens(d, v)
                            for d, v in zip(num_draft_tokens, valid_counts)]
                num_draft_tokens = self._front.teach(req_ids, num_draft_tokens,
                                                     valid_counts, self.counters)
            self._observe(req_ids, num_draft_tokens, valid_counts)
            verification = None
        cad = kwargs.get("common_attn_metadata")
        batch, decode_only = self._batch_view(req_ids, num_speculative_tokens, cad)
        free = None
        if self._front is not None:
            free, batch = self._look_up(req_ids, num_speculative_tokens, accepted, batch,
                                        kwargs["next_token_ids"])
        step = self._plan(req_ids, batch, num_speculative_tokens)
        self.policy_seconds += time.perf_counter() - start
        if step.num_steps == 0:
            return self._skip_draft_model(req_ids, step, verification, free)
        num_caught_up = self._catch_up_before_drafting(cad, step, batch)
        self._draft(step, cad, decode_only, args, kwargs)
        drafts = self._cut_and_keep(req_ids, step, verification, free)
        self._record_step(drafts, step, num_catch_up_tokens=num_caught_up)
        return drafts

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

    def _observe(self, req_ids: list[str], num_draft_tokens: list[int],
                 valid_counts: list[int]) -> None:
        """Count-based update from one verification (``observations``).
        ``valid_counts``: [num_reqs] accepted drafts + 1 (0 if discarded)."""
        observe_verifications(self.policy, self.records, req_ids, num_draft_tokens,
                              valid_counts)

    # -- 2. plan ------------------------------------------------------------------
    def _look_up(self, req_ids: list[str], num_speculative_tokens: int,
                 accepted: list[int] | None, batch: BatchView, next_token_ids):
        """The n-gram front (``ngram_front``): each request's lookup, the
        free lengths the policy chooses, and the batch the draft model's plan
        then sees (a limit of 0 where a free draft is verified). Returns
        ((offers, [num_reqs] free lengths), that batch)."""
        num_reqs = len(req_ids)
        discarded = self._runner.discard_request_mask.np[:num_reqs].tolist()
        offers = self._front.offers(self._runner, req_ids, num_speculative_tokens,
                                    accepted or [0] * num_reqs,
                                    next_token_ids[:num_reqs].tolist(), discarded)
        lengths = self._front.choose(req_ids, offers, batch)
        batch = dataclasses.replace(
            batch, draft_limits=tuple(0 if k else num_speculative_tokens for k in lengths),
            free_draft_tokens=tuple(lengths))
        return (offers, lengths), batch

    def _batch_view(self, req_ids: list[str], num_speculative_tokens: int, cad):
        """What the policy may know of this step (``BatchView``); the step's
        shape for a policy that reads step costs or may skip the draft."""
        if self._timer is None and self._catch_up is None:
            return BatchView(batch_size=len(req_ids)), None
        positions = step_positions(self._runner, len(req_ids))
        # Prefill chunks are compute-bound and hundreds of tokens long; a
        # line through them says little about verifying a few draft tokens,
        # which is what the decision is about: fit decode steps only.
        decode_only = positions.longest_query <= 1 + num_speculative_tokens
        if self._timer is not None:
            self._timer.on_plan(cad.num_actual_tokens, len(req_ids), decode_only)
        catch_up_tokens, remaining = (), ()
        if self._catch_up is not None:
            catch_up_tokens, remaining = self._catch_up.begin_step(self._runner, req_ids,
                                                                   positions)
        batch = BatchView(batch_size=len(req_ids), num_scheduled_tokens=cad.num_actual_tokens,
                          catch_up_tokens=catch_up_tokens, has_prefill=not decode_only,
                          remaining_tokens=remaining)
        return batch, decode_only

    def _plan(self, req_ids: list[str], batch: BatchView,
              num_speculative_tokens: int) -> DraftStep:
        policy = self.policy
        states = [self.records.policy_state(r) for r in req_ids]
        planned = [min(num_speculative_tokens, k) for k in policy.plan_batch(states, batch)]
        if policy.times_steps:
            planned = same_plan_on_every_rank(planned, self.device)
        tracing = trace.writer() is not None
        if tracing:  # VLLM_GAMMATUNE_TRACE only
            decision = policy.last_decision
            if decision is not None:
                trace.record_step(decision)
        return plan_draft_step(policy, states, planned, self.device, keep_token_probs=tracing,
                               early_exit=not self.hot_path)

    # -- 3. catch up (or skip the draft model) -------------------------------------
    def _skip_draft_model(self, req_ids: list[str], step: DraftStep,
                          verification=None, free=None) -> list[list[int]]:
        """No request drafts with the draft model: it does not run this step
        (the hot path still reads the last verification: this step's one
        read). Free drafts (``free``: offers and lengths) are the step's
        only drafts; without them the step has none."""
        assert self._catch_up is not None, "only a policy that skips_drafts plans 0"
        if verification is not None:
            num_draft_tokens, valid_counts = verification
            self._observe(req_ids, num_draft_tokens, read_on_host(valid_counts[:len(req_ids)]))
        self._catch_up.on_skipped()
        # vLLM's rejection sampler takes drafts without probabilities as
        # proposed with certainty, as a lookup's are
        self._last_draft_probs = None
        drafts = [[] for _ in req_ids]
        if free is not None:
            drafts = NgramFront.merge(drafts, *free)
        # with no draft at all, the engine core need not fetch any (draft_handoff)
        self.skipped_this_step = not any(drafts)
        self._record_step(drafts, step, skipped=True)
        return drafts

    def _catch_up_before_drafting(self, cad, step: DraftStep, batch: BatchView) -> int:
        """Run the draft over the positions the drafting requests missed;
        return how many it processed."""
        if self._catch_up is None:
            return 0
        return self._catch_up.catch_up(
            self, cad, self._runner.input_batch.token_ids_cpu, step.planned_lengths,
            batch.catch_up_tokens, self._timer)

    # -- 4. draft: vLLM's draft loop ------------------------------------------------
    def _draft(self, step: DraftStep, cad, decode_only: bool, args, kwargs) -> None:
        """Run vLLM's draft loop for ``step.num_steps`` passes at most."""
        if self._timer is not None:
            # the first pass runs over the step's target tokens: over a
            # prefill chunk it is no decode-regime sample (``_batch_view``) but a
            # prefill-like one, priced like a catch-up; later passes are
            # decode passes
            num_reqs = step.planned.shape[0]
            self._timer.start_passes(cad.num_actual_tokens + num_reqs,
                                     first_pass_is_prefill=not decode_only)
        self._step = step
        try:
            super().propose(step.num_steps, *args, **kwargs)
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
    def _cut_and_keep(self, req_ids: list[str], step: DraftStep,
                      verification=None, free=None) -> list[list[int]]:
        """Read the step back (with the last verification, on the hot path),
        cut each draft to its length, put the free drafts (``free``: offers
        and lengths) in place, and keep what its verification and the trace
        will need."""
        start = time.perf_counter()
        self.policy.draft_ended(len(step.token_ids))
        verifier = self.adasd_verifier
        # AdaSD's device verifications (hot path), read with the step
        unread = [] if verifier is None else verifier.unread_results()
        if verification is None:
            read = step.read_back(extra=unread)
        else:
            num_draft_tokens, valid_counts = verification
            # the verification first: the policy learns from it before it
            # judges this step's tokens, in the host path's order
            read = step.read_back(valid_counts, extra=unread)
            self._observe(req_ids, num_draft_tokens, read.valid_counts)
        if unread:
            verifier.learn(read.extra)
        step.replay_token_rule()
        drafts = step.drafts()
        draft_probs = step.draft_probs()
        if free is not None and any(free[1]):
            drafts = NgramFront.merge(drafts, *free)
            if draft_probs is not None:
                draft_probs = NgramFront.probs_with_free_rows(draft_probs, drafts, free[1])
        if draft_probs is not None:  # read by vLLM's rejection sampler
            self._last_draft_probs = draft_probs
        if step.keep_entropies:
            for req_id, kept in zip(req_ids, step.kept_drafts()):
                self.records.keep_draft(req_id, kept)
        if step.token_probs:
            for req_id, token_probs in zip(req_ids, step.traced_token_probs()):
                self.records.keep_traced_token_probs(req_id, token_probs)
        self.policy_seconds += time.perf_counter() - start
        return drafts

    # -- 6. record --------------------------------------------------------------------
    def _record_step(self, drafts: list[list[int]], step: DraftStep, skipped: bool = False,
                     num_catch_up_tokens: int = 0) -> None:
        if self._metrics is not None:
            discarded = self._runner.discard_request_mask.np[:len(drafts)]
            self._metrics.record_step(drafts, step, discarded, len(self.records),
                                      self.policy_seconds, skipped=skipped,
                                      num_catch_up_tokens=num_catch_up_tokens)
        if self._timer is not None:
            self._timer.on_step_end()
