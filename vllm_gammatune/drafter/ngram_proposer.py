"""The n-gram drafter: vLLM's prompt lookup with per-request lengths.

``AdaptiveNgramProposer`` subclasses vLLM's ``NgramProposer`` (``method:
"ngram"``), so the lookup, the scheduler and the rejection sampler are
vLLM's own. The lookup runs no model: it finds an earlier occurrence of the
request's longest suffix of ``n`` tokens (``prompt_lookup_min`` to
``prompt_lookup_max``) and offers the tokens that followed it, on the host,
in microseconds. What costs is verifying them, and how many of
them to verify is what the plugin's policy decides. One step:

1. observe: the draft tokens each request had verified this step (handed
   over by the sampling step, ``note_sampling``, from vLLM's
   ``SpecDecodeMetadata``) and the tokens it kept (``sampled_token_ids``:
   accepted + 1), with the timings, are the policy's observation
   (``observations``);
2. look up: vLLM's lookup at the cap offers each request up to the cap's
   tokens (none without a match);
3. plan: the policy's lengths, each at most what the request was offered
   (``BatchView.draft_limits``); every tensor-parallel rank drafts rank 0's
   plan when the plan reads the clock (``tp_agreement``);
4. cut and record: each offer cut to its length; the step's metrics and,
   for a policy that plans from measured costs, its timing (the lookup is
   timed as the step's one draft pass, so the cost model learns that a
   draft costs almost nothing and verifying it is what costs).

There is no draft KV cache, so nothing is caught up after a step that
drafts nothing (``DrafterTraits(keeps_draft_kv=False)``), and no draft
distribution, so no per-token stop (``methods.drafters``).

The CUDA hot path holds as it is: vLLM's n-gram path hands the sampled
tokens over as host lists, the lookup reads the runner's host copy of the
token ids, and the plan is host data; the drafter reads no device tensor
(but for the tensor-parallel agreement, once a step, as the draft-model
drafter does).
"""

from __future__ import annotations

import time
from collections.abc import Collection

import torch

from vllm.logger import init_logger
from vllm.v1.spec_decode.ngram_proposer import NgramProposer
from vllm_gammatune.draft_kv.catch_up import step_positions
from vllm_gammatune.drafter.contract import PluginDrafter
from vllm_gammatune.drafter.observations import (
    PlanSteps,
    count_verifications,
    deliver,
    trace_verifications,
)
from vllm_gammatune.drafter.request_records import RequestRecords
from vllm_gammatune.drafter.step_metrics import attach_step_metrics
from vllm_gammatune.drafter.step_timing import StepTimer
from vllm_gammatune.drafter.tp_agreement import same_plan_on_every_rank
from vllm_gammatune.methods import settings_from_additional_config
from vllm_gammatune.policies import BatchView, CostObserver, DrafterTraits, ExplainsSteps
from vllm_gammatune.telemetry import trace
from vllm_gammatune.telemetry.metrics import StepCounters

logger = init_logger(__name__)


class AdaptiveNgramProposer(NgramProposer, PluginDrafter):
    """vLLM's NgramProposer, verifying each request's own length."""

    #: the runner this drafter serves (``attach_runner``, after the runner's
    #: init); None while vLLM's init warms the lookup up with a dummy batch
    _runner = None

    def __init__(self, vllm_config):
        super().__init__(vllm_config)
        settings = settings_from_additional_config(vllm_config.additional_config)
        assert settings is not None, "AdaptiveNgramProposer without settings"
        self.settings = settings
        self.policy = settings.make_policy()
        #: a policy that plans from measured costs: the timer, and rank 0's plan
        self._plans_from_costs = plans_from_costs = isinstance(self.policy, CostObserver)
        if plans_from_costs:
            self.policy.adapt_to_drafter(DrafterTraits(keeps_draft_kv=False))
        self.records = RequestRecords(self.policy, also_forget=(trace.forget_missing,))
        self._metrics = attach_step_metrics(vllm_config, settings.num_speculative_tokens)
        #: the lookup runs on the host: the clock needs no device sync
        self._timer = StepTimer(torch.device("cpu")) if plans_from_costs else None
        #: [num_reqs] the draft tokens verified in the step being sampled
        self._verified: list[int] | None = None
        self._steps = PlanSteps()
        #: seconds in the plugin's own code (``vllm:gammatune_plugin_time_us``)
        self.policy_seconds = 0.0
        logger.info("vllm-gammatune: n-gram drafting with method=%s %s", settings.method,
                    settings.to_dict())

    # -- what the integration asks of the drafter ------------------------------
    def attach_runner(self, runner) -> None:
        """vLLM builds this drafter with the config alone; the plugin hands
        it the runner once the runner is built (``integration.runner_init``)."""
        self._runner = runner

    @property
    def counters(self) -> StepCounters | None:
        """The engine's metrics file (rank-0 worker only), or None."""
        return None if self._metrics is None else self._metrics.counters

    def forget_finished(self, live_req_ids: Collection[str]) -> None:
        self.records.forget_missing(live_req_ids)
        if self.counters is not None:
            self.counters.set_tracked_requests(len(self.records))

    def note_sampling(self, num_draft_tokens: list[int]) -> None:
        self._verified = num_draft_tokens

    # -- one step ----------------------------------------------------------------
    def propose(self, num_speculative_tokens, sampled_token_ids, num_tokens_no_spec,
                token_ids_cpu, slot_mappings=None):
        runner = self._runner
        if runner is None or num_speculative_tokens == 0:
            return super().propose(num_speculative_tokens, sampled_token_ids,
                                   num_tokens_no_spec, token_ids_cpu, slot_mappings)
        start = time.perf_counter()
        num_reqs = len(sampled_token_ids)
        req_ids = list(runner.input_batch.req_ids[:num_reqs])
        self.records.forget_missing(runner.requests)
        if self._timer is not None:
            self._timer.begin_step(self._steps.next)
        # 1. observe
        verified, self._verified = self._verified, None
        verifications = [] if verified is None else count_verifications(
            req_ids, verified, [len(tokens) for tokens in sampled_token_ids],
            self._steps.drafted_at)
        trace_verifications(self.policy, self.records, verifications)
        positions = step_positions(runner, num_reqs)
        num_scheduled_tokens = sum(e - s for s, e in zip(positions.starts, positions.ends))
        decode_only = positions.longest_query <= 1 + num_speculative_tokens
        if self._timer is not None:
            self._timer.on_plan(num_scheduled_tokens, num_reqs, decode_only)
        # 2. look up, at the cap: [num_reqs] lists of at most the cap's tokens
        # (vLLM's time, not the plugin's)
        self.policy_seconds += time.perf_counter() - start
        if self._timer is not None:
            self._timer.start_passes(num_reqs, first_pass_is_prefill=False)
        offers = super().propose(num_speculative_tokens, sampled_token_ids,
                                 num_tokens_no_spec, token_ids_cpu, slot_mappings)
        if self._timer is not None:
            self._timer.on_pass(num_reqs)
            self._timer.end_passes()
        start = time.perf_counter()
        deliver(self.policy, self.records, self._steps.next, verifications,
                () if self._timer is None else self._timer.take())
        # 3. plan
        batch = BatchView(num_reqs, num_scheduled_tokens=num_scheduled_tokens,
                          has_prefill=not decode_only,
                          draft_limits=tuple(len(offer) for offer in offers))
        states = [self.records.policy_states[r] for r in req_ids]
        planned = [min(k, num_speculative_tokens, len(offer))
                   for k, offer in zip(self.policy.plan_batch(states, batch), offers)]
        if self._plans_from_costs:
            planned = same_plan_on_every_rank(planned)
        self._steps.planned()
        if trace.writer() is not None and isinstance(self.policy, ExplainsSteps):
            decision = self.policy.last_decision
            if decision is not None:
                trace.record_step(decision)
        # 4. cut and record
        drafts = [offer[:k] for offer, k in zip(offers, planned)]
        if self._plans_from_costs:
            self._timer.passes_run(max(planned, default=0))
        self.policy_seconds += time.perf_counter() - start
        if self._metrics is not None:
            discarded = runner.discard_request_mask.np[:num_reqs]
            self._metrics.record_lookup_step(drafts, planned, discarded, len(self.records),
                                             self.policy_seconds)
        if self._timer is not None:
            self._timer.on_step_end()
        return drafts
