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
3. with a per-token stop (a confidence threshold, AdaSD's entropy
   threshold, or the policy's own decision after each pass from the draft's
   probability of each new token, ``draft_on``), marks a request as stopped
   where its draft ends, and ends the whole step as soon as every request
   has stopped (no further draft forward; ``draft_step``);
4. returns ``list[list[int]]``, one list per request, of its own length: the
   scheduler reserves and verifies exactly those (as for ngram drafts).

The proposer asks nothing of a policy but the hooks of ``DraftLengthPolicy``
(``policies.base``): its per-token stop (``stop_measure``), whether it learns
token by token at the rejection sampler (``learns_per_token``, AdaSD:
``acceptance.AdaSDVerifier``), whether it reads measured step costs
(``times_steps``: ``step_timing``) and whether it may skip the draft model
for a whole step (``skips_drafts``: ``catch_up`` records the positions the
draft missed and catches a request up before it drafts again).

State is a ``RequestStateTable`` keyed by ``req_id``, swept against the
runner's live requests every step (finished and aborted requests leave it;
preempted ones keep their learned window).

Requirements: synchronous scheduling (the plugin's config step turns vLLM's
async scheduling off; see docs/cuda.md), padded drafter batch (vLLM's only mode for
draft models), a draft sharing the target's vocabulary.
"""

from __future__ import annotations

import time

import torch

from vllm.logger import init_logger
from vllm.v1.spec_decode.draft_model import DraftModelProposer
from vllm_gammatune.telemetry import trace
from vllm_gammatune.verify.adasd import AdaSDVerifier
from vllm_gammatune.draft_kv.catch_up import DraftCatchUp, step_positions
from vllm_gammatune.methods.settings import plugin_section, settings_from_additional_config
from vllm_gammatune.draft_kv.holes import DraftKVHoles
from vllm_gammatune.drafter.draft_step import (
    DraftStep,
    EveryRequestStopped,
    draft_distribution,
    proposed_token_probs,
)
from vllm_gammatune.telemetry.metrics import StepCounters
from vllm_gammatune.policies import BatchView
from vllm_gammatune.drafter.request_states import RequestStateTable
from vllm_gammatune.drafter.step_timing import (
    StepTimer,
    same_decisions_on_every_rank,
    same_plan_on_every_rank,
)

logger = init_logger(__name__)


class AdaptiveDraftModelProposer(DraftModelProposer):
    """vLLM's DraftModelProposer, drafting each request's own length."""

    #: a step where no request has draft tokens is sampled without vLLM's
    #: rejection sampler (``acceptance.sample_step``)
    samples_draftless_steps_plainly = True

    def __init__(self, vllm_config, device, runner=None):
        super().__init__(vllm_config=vllm_config, device=device, runner=runner)
        settings = settings_from_additional_config(vllm_config.additional_config)
        assert settings is not None, "AdaptiveDraftModelProposer without settings"
        self.settings = settings
        self.policy = settings.make_policy()
        self.request_states = RequestStateTable(self.policy)
        self._runner = runner
        self._step: DraftStep | None = None
        # (num_draft_tokens per request, [num_reqs] valid sampled counts)
        self._pending_verification: tuple[list[int], torch.Tensor] | None = None
        #: a policy that learns per token: req_id -> ([drafted, vocab] q_i, or
        #: None without relaxed verification, [drafted] H(q_i)) of its latest
        #: draft, read by ``acceptance.AdaSDVerifier``
        self.pending_drafts: dict[str, tuple[torch.Tensor | None, torch.Tensor]] = {}
        #: with a trace only: req_id -> the draft's probability of each token
        #: of its latest draft, until its verification is written
        self.traced_token_probs: dict[str, list[float]] = {}
        #: the per-token verification at the rejection-sampling step, or None
        self.adasd_verifier = AdaSDVerifier(self) if self.policy.learns_per_token else None
        self._counters: StepCounters | None = None
        metrics_path = plugin_section(vllm_config.additional_config).get("metrics_path")
        if metrics_path and vllm_config.parallel_config.rank == 0:
            try:
                self._counters = StepCounters.attach(
                    metrics_path, settings.num_speculative_tokens
                )
            except (OSError, ValueError) as exc:
                # Another node, or a front end of another plugin version: the
                # plugin's metrics are lost, the engine runs on.
                logger.warning("vllm-gammatune: metrics file unusable (%s); the "
                               "plugin's own metrics are off", exc)
        #: set when this step skipped the draft model (no request has draft
        #: tokens): the engine core then does not fetch them (``draft_handoff``)
        self.skipped_this_step = False
        self.draft_kv_holes = DraftKVHoles()
        #: skipping the draft model and catching it up (``skips_drafts``)
        self._catch_up = (DraftCatchUp(self.draft_kv_holes) if self.policy.skips_drafts
                          else None)
        #: the step costs the policy reads (``times_steps``)
        self._timer = StepTimer(self.policy, self.device) if self.policy.times_steps else None
        #: the drafting scale the metrics report: the last one with evidence
        self._reported_drafting_scale = 1.0
        #: seconds spent in the plugin's own code per engine lifetime (planning,
        #: observing, cutting drafts; not the draft model), exported as
        #: ``vllm:gammatune_plugin_time_us``
        self.policy_seconds = 0.0
        logger.info(
            "vllm-gammatune: drafting with method=%s %s",
            settings.method,
            settings.to_dict(),
        )

    def forget_requests_not_in(self, live_req_ids) -> None:
        """Drop every per-request entry (policy state, kept drafts, draft-KV
        holes, traced token probabilities and trace step counters) of
        requests that are not live."""
        self.request_states.forget_missing(live_req_ids)
        for table in (self.pending_drafts, self.traced_token_probs):
            for req_id in [r for r in table if r not in live_req_ids]:
                del table[req_id]
        self.draft_kv_holes.forget_missing(live_req_ids)
        trace.forget_missing(live_req_ids)

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
        """Count-based update (a policy that learns per token learns at the
        rejection sampler instead: ``acceptance``)."""
        if self._pending_verification is None or self.policy.learns_per_token:
            self._pending_verification = None
            return
        num_draft_tokens, valid_counts = self._pending_verification
        self._pending_verification = None
        valid = valid_counts.tolist()
        for req_id, drafted, num_valid in zip(req_ids, num_draft_tokens, valid):
            if drafted <= 0 or num_valid <= 0:
                continue
            accepted = min(drafted, num_valid - 1)
            state = self.request_states.get(req_id)
            if trace.writer() is not None:  # VLLM_GAMMATUNE_TRACE only
                self._trace_verification(req_id, state, drafted, accepted)
            self.request_states.set(
                req_id, self.policy.observe(state, drafted, accepted, batch)
            )

    def _trace_verification(self, req_id: str, state, drafted: int, accepted: int) -> None:
        details = {}
        probs = self.traced_token_probs.pop(req_id, None)
        if probs is not None:
            details["token_probs"] = [round(q, 4) for q in probs[:drafted]]
        details.update(self.policy.verification_details(state, drafted) or {})
        trace.record(req_id, drafted, accepted, details)

    # -- 2-4. plan, draft, cut ---------------------------------------------
    def _plan(self, req_ids: list[str], batch: BatchView, num_speculative_tokens: int):
        policy = self.policy
        states = [self.request_states.get(r) for r in req_ids]
        planned = [min(num_speculative_tokens, k) for k in policy.plan_batch(states, batch)]
        if policy.times_steps:
            planned = same_plan_on_every_rank(planned, self.device)
        if trace.writer() is not None:  # VLLM_GAMMATUNE_TRACE only
            decision = policy.last_decision
            if decision is not None:
                trace.record_step(decision)
        measure = policy.stop_measure
        thresholds = None
        if measure is not None:  # per request (AdaSD: T_G, Algorithm 1 line 6)
            thresholds = torch.tensor([policy.stop_threshold(s) for s in states],
                                      dtype=torch.float32, device=self.device)
        token_rule = None
        if policy.decides_per_token:
            def token_rule(position, token_probs, active):
                return same_decisions_on_every_rank(
                    policy.draft_on(states, position, token_probs, active), self.device)
        return DraftStep(planned, self.device, thresholds, stop_on=measure or "confidence",
                         keep_entropies=policy.learns_per_token,
                         keep_distributions=policy.relaxes_verification,
                         token_rule=token_rule,
                         keep_token_probs=trace.writer() is not None)

    def _batch_view(self, req_ids: list[str], num_speculative_tokens: int, cad):
        """What the policy may know of this step (``BatchView``); the step's
        shape for a policy that reads step costs or may skip the draft."""
        if self._timer is None and self._catch_up is None:
            return BatchView(batch_size=len(req_ids)), None
        positions = step_positions(cad)
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

    def propose(self, num_speculative_tokens, *args, **kwargs):
        runner = self._runner
        if runner is None or num_speculative_tokens == 0:
            if self._timer is not None:
                self._timer.forget_last_step()
            return super().propose(num_speculative_tokens, *args, **kwargs)
        start = time.perf_counter()
        req_ids = list(runner.input_batch.req_ids)
        self.forget_requests_not_in(runner.requests)
        self._observe_verification(req_ids, BatchView(batch_size=len(req_ids)))
        cad = kwargs.get("common_attn_metadata")
        batch, decode_only = self._batch_view(req_ids, num_speculative_tokens, cad)
        step = self._plan(req_ids, batch, num_speculative_tokens)
        self.policy_seconds += time.perf_counter() - start
        if step.num_steps == 0:
            return self._skip_draft_model(req_ids, step)
        caught_up_tokens = 0
        if self._catch_up is not None:
            caught_up_tokens = self._catch_up.catch_up(
                self, cad, runner.input_batch.token_ids_cpu, step.planned.tolist(),
                batch.catch_up_tokens, self._timer)
        if self._timer is not None:
            # the first pass runs over the step's target tokens: over a
            # prefill chunk it is no decode-regime sample (see above) but a
            # prefill-like one, priced like a catch-up; later passes are
            # decode passes
            self._timer.start_passes(cad.num_actual_tokens + len(req_ids),
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
        start = time.perf_counter()
        self.policy.draft_ended(len(step.token_ids))
        # [batch, tokens drafted this step]
        draft_token_ids = torch.stack(step.token_ids, dim=1)
        if step.probs:
            # [batch, tokens drafted this step, vocab], read by the rejection sampler
            self._last_draft_probs = torch.stack(step.probs, dim=1).contiguous()
        lengths = step.lengths.tolist()
        rows = draft_token_ids.tolist()
        drafts = [row[:n] for row, n in zip(rows, lengths)]
        if step.keep_entropies:
            self._keep_draft_distributions(req_ids, lengths, step)
        if step.token_probs:
            # [batch, tokens drafted this step]
            token_probs = torch.stack(step.token_probs, dim=1).tolist()
            self.traced_token_probs.update(
                (req_id, row[:n]) for req_id, row, n in zip(req_ids, token_probs, lengths))
        self.policy_seconds += time.perf_counter() - start
        self._record_metrics(drafts, step.planned.tolist(), step,
                             num_catch_up_tokens=caught_up_tokens)
        if self._timer is not None:
            self._timer.on_step_end()
        return drafts

    def _skip_draft_model(self, req_ids, step: DraftStep):
        """No request drafts: the draft model does not run this step."""
        assert self._catch_up is not None, "only a policy that skips_drafts plans 0"
        self.skipped_this_step = True
        self._catch_up.on_skipped()
        self._last_draft_probs = None
        self._record_metrics([[] for _ in req_ids], step.planned.tolist(), step,
                             skipped=True)
        if self._timer is not None:
            self._timer.on_step_end()
        return [[] for _ in req_ids]

    def _keep_draft_distributions(self, req_ids, lengths, step: DraftStep) -> None:
        """Per request: q_i (relaxed modes only) and H(q_i) of its drafted tokens.

        q_i is stored in bfloat16: vocab x 2 bytes per draft token (Qwen2.5's
        151,936 entries: 297 KiB per token, 5.8 MiB for a 20-token draft); kept
        only for AdaSD with relaxed verification, and only until that draft is
        verified. Gen-Only keeps the entropies alone.
        """
        # [batch, drafted]
        entropies = torch.stack(step.entropies, dim=1)
        # [batch, drafted, vocab] or None
        distributions = (torch.stack(step.distributions, dim=1).to(torch.bfloat16)
                         if step.distributions else None)
        self.pending_drafts.update(
            (req_id, (None if distributions is None else distributions[i, :n],
                      entropies[i, :n]))
            for i, (req_id, n) in enumerate(zip(req_ids, lengths))
        )

    def _record_metrics(self, drafts, planned, step: DraftStep, skipped: bool = False,
                        num_catch_up_tokens: int = 0) -> None:
        if self._counters is None:
            return
        num_reqs = len(drafts)
        discarded = self._runner.discard_request_mask.np[:num_reqs]
        kept = [i for i in range(num_reqs) if not discarded[i]]
        early = step.stopped_early.tolist()
        num_early = sum(1 for i in kept if early[i])
        num_stopped_tokens = sum(planned[i] - len(drafts[i]) for i in kept if early[i])
        entropy_stops = step.stop_on == "entropy"
        cycle_check = self.policy.cycle_check
        if cycle_check is not None and cycle_check.is_informed(num_reqs):
            # the gauge keeps the last scale the check had evidence for: the
            # tail of a burst (fewer requests, few cycles) does not reset it
            self._reported_drafting_scale = cycle_check.drafting_scale(num_reqs)
        self._counters.record_step(
            [len(drafts[i]) for i in kept],
            sum(planned[i] for i in kept),
            0 if entropy_stops else num_early,
            len(self.request_states),
            num_draft_forward_passes=len(step.token_ids),
            num_entropy_stops=num_early if entropy_stops else 0,
            policy_seconds=self.policy_seconds,
            num_skipped_draft_steps=int(skipped),
            num_catch_up_tokens=num_catch_up_tokens,
            drafting_scale=None if cycle_check is None else self._reported_drafting_scale,
            num_stopped_draft_tokens=num_stopped_tokens,
        )

    # -- the hook into vLLM's draft loop --------------------------------------
    def _sample_draft_tokens(self, hidden_states, sampling_metadata):
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
            # [batch, vocab]
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
            # [batch]; read from the distribution where one was built
            token_probs = (proposed_token_probs(logits, token_ids, sampling_metadata)
                           if distribution is None else
                           distribution.gather(-1, token_ids.long().unsqueeze(-1)).squeeze(-1))
        every_request_stopped = step.record(token_ids, probs, distribution, token_probs)
        self.policy_seconds += time.perf_counter() - started
        if every_request_stopped:
            raise EveryRequestStopped
        return token_ids, probs
