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

When every request of a step plans 0 tokens (``gammatune_cost``), the draft
model does not run at all that step; ``draft_kv`` records the positions it
missed and catches a request up before it drafts again. For that method the
proposer also times the target step (from the end of one proposal to the
start of the next, at points where the device is synchronised anyway) and
every draft forward pass, and feeds both to the policy's cost model; and the
wall time from one plan to the next, which the policy's check against the
clock charges to the plan (so time no pass timer sees counts too).

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
from vllm_gammatune import trace
from vllm_gammatune.acceptance import AdaSDVerifier
from vllm_gammatune.config import plugin_section, settings_from_additional_config
from vllm_gammatune.draft_kv import DraftKVHoles, run_catch_up
from vllm_gammatune.metrics import StepCounters
from vllm_gammatune.policies import AdaSDPolicy, BatchView, CostAwarePolicy
from vllm_gammatune.policies.cost_aware import CATCH_UP_HORIZON_TOKENS
from vllm_gammatune.state import RequestStateTable
from vllm_gammatune.stats import entropy_bits

logger = init_logger(__name__)


class _EveryRequestStopped(Exception):
    """Raised inside vLLM's draft loop once no request drafts further."""


class _DraftStep:
    """Book-keeping of one ``propose`` call (one engine step).

    Args:
        planned: per request, how many tokens the policy asked for.
        stop_thresholds: [batch] per-request early-stop thresholds, or None:
            with ``stop_on="confidence"`` a request stops after a token whose
            top draft probability is below its threshold (GammaTune+,
            AssistantThreshold); with ``stop_on="entropy"`` after a token whose
            draft entropy exceeds it (AdaSD's T_G, Algorithm 1 line 6).
        keep_entropies: keep every step's H(q_i) (AdaSD learns T_G from the
            entropy of the first rejected draft token).
        keep_distributions: keep every step's draft distribution q_i (AdaSD's
            relaxed verification needs it; Gen-Only does not).
    """

    def __init__(
        self,
        planned: list[int],
        device: torch.device,
        stop_thresholds: torch.Tensor | None = None,
        stop_on: str = "confidence",
        keep_entropies: bool = False,
        keep_distributions: bool = False,
    ):
        self.num_steps = max(planned)
        self.stop_thresholds = stop_thresholds
        self.stop_on = stop_on
        self.keep_entropies = keep_entropies
        self.keep_distributions = keep_distributions
        # [batch]
        self.planned = torch.tensor(planned, dtype=torch.int32, device=device)
        # [batch] final number of draft tokens per request
        self.lengths = self.planned.clone()
        # [batch] True once the request drafts no further
        self.stopped = torch.zeros_like(self.planned, dtype=torch.bool)
        # [batch] True where the request was stopped early by its threshold
        self.stopped_early = torch.zeros_like(self.stopped)
        self.token_ids: list[torch.Tensor] = []  # num_steps x [batch]
        self.probs: list[torch.Tensor] = []  # vLLM's draft probs, num_steps x [batch, vocab]
        self.distributions: list[torch.Tensor] = []  # q_i, num_steps x [batch, vocab]
        self.entropies: list[torch.Tensor] = []  # H(q_i), num_steps x [batch]

    @property
    def needs_distribution(self) -> bool:
        return (self.stop_thresholds is not None or self.keep_entropies
                or self.keep_distributions)

    def record(
        self,
        token_ids: torch.Tensor,
        probs: torch.Tensor | None,
        distribution: torch.Tensor | None,
    ) -> bool:
        """Add one draft position; return True when every request has stopped."""
        self.token_ids.append(token_ids)
        if probs is not None:
            self.probs.append(probs)
        position = len(self.token_ids)  # tokens drafted so far, 1-based
        reached_plan = self.planned <= position
        if distribution is not None:
            entropy = None
            if self.keep_entropies or self.stop_on == "entropy":
                entropy = entropy_bits(distribution)  # [batch]
            if self.keep_entropies:
                self.entropies.append(entropy)
            if self.keep_distributions:
                self.distributions.append(distribution)
            if self.stop_thresholds is not None:
                if self.stop_on == "entropy":
                    stop = entropy > self.stop_thresholds
                else:
                    stop = distribution.max(dim=-1).values < self.stop_thresholds
                early = stop & ~self.stopped & ~reached_plan
                self.lengths = torch.where(
                    early, torch.full_like(self.lengths, position), self.lengths
                )
                self.stopped_early |= early
                self.stopped |= early
        self.stopped |= reached_plan
        if position >= self.num_steps or self.stop_thresholds is None:
            return False
        return bool(self.stopped.all())


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
        self._step: _DraftStep | None = None
        # (num_draft_tokens per request, [num_reqs] valid sampled counts)
        self._pending_verification: tuple[list[int], torch.Tensor] | None = None
        #: AdaSD: req_id -> ([drafted, vocab] q_i or None in Gen-Only,
        #: [drafted] H(q_i)) of its latest draft, read by ``acceptance.AdaSDVerifier``
        self.pending_drafts: dict[str, tuple[torch.Tensor | None, torch.Tensor]] = {}
        #: AdaSD's verification at the rejection-sampling step, or None
        self.adasd_verifier = (
            AdaSDVerifier(self) if isinstance(self.policy, AdaSDPolicy) else None
        )
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
        #: gammatune_cost: measure step costs, skip the draft when nobody drafts
        self._cost_aware = isinstance(self.policy, CostAwarePolicy)
        #: set when this step skipped the draft model (no request has draft
        #: tokens): the engine core then does not fetch them (``draft_handoff``)
        self.skipped_this_step = False
        self.draft_kv_holes = DraftKVHoles()
        # this step's per-request end positions and KV block table rows
        self._step_ends: list[int] = []
        self._block_rows = []
        self._kv_block_size = 1
        self._clock = time.perf_counter
        self._last_step_end: float | None = None
        #: the drafting scale the metrics report: the last one with evidence
        self._reported_drafting_scale = 1.0
        #: when the last plan was made (the cycle check's wall clock)
        self._last_plan_time: float | None = None
        # start time and token count of the draft pass under way
        self._pass_started: float | None = None
        self._pass_tokens = 0
        self._time_later_passes = False
        #: the pass under way is the first over a step with a prompt chunk
        self._first_pass_is_prefill = False
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
        """Drop every per-request entry (policy state, AdaSD's kept drafts,
        draft-KV holes) of requests that are not live."""
        self.request_states.forget_missing(live_req_ids)
        for req_id in [r for r in self.pending_drafts if r not in live_req_ids]:
            del self.pending_drafts[req_id]
        self.draft_kv_holes.forget_missing(live_req_ids)

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
        """Count-based update (AdaSD updates in ``acceptance`` instead)."""
        if self._pending_verification is None or isinstance(self.policy, AdaSDPolicy):
            self._pending_verification = None
            return
        num_draft_tokens, valid_counts = self._pending_verification
        self._pending_verification = None
        valid = valid_counts.tolist()
        for req_id, drafted, num_valid in zip(req_ids, num_draft_tokens, valid):
            if drafted <= 0 or num_valid <= 0:
                continue
            accepted = min(drafted, num_valid - 1)
            trace.record(req_id, drafted, accepted)  # VLLM_GAMMATUNE_TRACE only
            state = self.request_states.get(req_id)
            self.request_states.set(
                req_id, self.policy.observe(state, drafted, accepted, batch)
            )

    # -- 2-4. plan, draft, cut ---------------------------------------------
    def _plan(self, req_ids: list[str], batch: BatchView, num_speculative_tokens: int):
        states = [self.request_states.get(r) for r in req_ids]
        planned = [min(num_speculative_tokens, k)
                   for k in self.policy.plan_batch(states, batch)]
        if self._cost_aware:
            planned = self._same_plan_on_every_rank(planned)
            if trace.writer() is not None:  # VLLM_GAMMATUNE_TRACE only
                trace.record_step(self.policy.last_decision)
        policy = self.policy
        if isinstance(policy, AdaSDPolicy):
            thresholds = None
            if policy.stops_on_entropy:  # T_G per request (Algorithm 1 line 6)
                thresholds = torch.tensor(
                    [policy.generation_threshold(s) for s in states],
                    dtype=torch.float32, device=self.device)
            return _DraftStep(planned, self.device, thresholds, stop_on="entropy",
                              keep_entropies=True,
                              keep_distributions=policy.relaxes_verification)
        thresholds = None
        if policy.confidence_threshold is not None:
            thresholds = torch.full((len(planned),), policy.confidence_threshold,
                                    dtype=torch.float32, device=self.device)
        return _DraftStep(planned, self.device, thresholds, stop_on="confidence")

    def propose(self, num_speculative_tokens, *args, **kwargs):
        runner = self._runner
        if runner is None or num_speculative_tokens == 0:
            self._last_step_end = None  # the next gap is not one target step
            self._last_plan_time = None
            return super().propose(num_speculative_tokens, *args, **kwargs)
        start = time.perf_counter()
        req_ids = list(runner.input_batch.req_ids)
        batch = BatchView(batch_size=len(req_ids))
        self.forget_requests_not_in(runner.requests)
        self._observe_verification(req_ids, batch)
        step_starts: list[int] = []
        decode_only = False
        if self._cost_aware:
            cad = kwargs["common_attn_metadata"]
            step_starts, self._step_ends, longest_query = self._step_starts(cad)
            # Prefill chunks are compute-bound and hundreds of tokens long; a
            # line through them says little about verifying a few draft tokens,
            # which is what the decision is about: fit decode steps only.
            decode_only = longest_query <= 1 + num_speculative_tokens
            now = self._synchronized_clock()
            if self._last_plan_time is not None:
                self.policy.observe_cycle_wall_time(now - self._last_plan_time)
            self._last_plan_time = now
            if decode_only:
                self._time_target_step(cad.num_actual_tokens, len(req_ids), now)
            block_table = runner.input_batch.block_table[0]
            # [num_reqs, max_num_blocks_per_req] the requests' KV blocks (CPU)
            self._block_rows = block_table.block_table.np[:len(req_ids)]
            self._kv_block_size = block_table.block_size
            for req_id, step_start, blocks in zip(req_ids, step_starts, self._block_rows):
                self.draft_kv_holes.inherit(req_id, step_start, blocks, self._kv_block_size)
            catch_up_tokens = tuple(self.draft_kv_holes.catch_up_tokens(r, s)
                                    for r, s in zip(req_ids, step_starts))
            batch = BatchView(
                batch_size=len(req_ids),
                num_scheduled_tokens=cad.num_actual_tokens,
                catch_up_tokens=catch_up_tokens,
                has_prefill=not decode_only,
                remaining_tokens=self._remaining_tokens(req_ids) if any(catch_up_tokens)
                else (),
            )
        step = self._plan(req_ids, batch, num_speculative_tokens)
        self.policy_seconds += time.perf_counter() - start
        if step.num_steps == 0:
            return self._skip_draft_model(req_ids, step_starts, step)
        caught_up_tokens = 0
        if self._cost_aware:
            caught_up_tokens = self._catch_up(req_ids, step_starts, step, batch, kwargs)
            cad = kwargs["common_attn_metadata"]
            self._pass_tokens = cad.num_actual_tokens + len(req_ids)
            # the first pass runs over the step's target tokens: over a
            # prefill chunk it is no decode-regime sample (see above) but a
            # prefill-like one, priced like a catch-up; later passes are
            # decode passes
            self._first_pass_is_prefill = not decode_only
            self._pass_started = self._synchronized_clock()
            self._time_later_passes = True
        self._step = step
        try:
            super().propose(step.num_steps, *args, **kwargs)
        except _EveryRequestStopped:
            pass
        finally:
            self._step = None
            self._pass_started = None
            self._time_later_passes = False
            self._first_pass_is_prefill = False
        start = time.perf_counter()
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
        self.policy_seconds += time.perf_counter() - start
        self._record_metrics(drafts, step.planned.tolist(), step,
                             num_catch_up_tokens=caught_up_tokens)
        if self._cost_aware:
            self._last_step_end = self._clock()
        return drafts

    # -- gammatune_cost: skipping, catching up, timing ------------------------
    def _same_plan_on_every_rank(self, planned: list[int]) -> list[int]:
        """Tensor parallelism: every rank drafts what TP rank 0 planned.

        The count-based policies see the same verifications on every rank and
        decide alike; the cost-aware one also reads each rank's own clock, so
        its ranks could differ (and a draft forward with different lengths on
        two ranks would hang their collectives). One small broadcast per step.
        """
        from vllm.distributed import get_tp_group

        group = get_tp_group()
        if group.world_size == 1:
            return planned
        # [num_reqs]
        plan = torch.tensor(planned, dtype=torch.int64, device=self.device)
        return group.broadcast(plan, src=0).tolist()

    def _remaining_tokens(self, req_ids: list[str]) -> tuple[int, ...]:
        """Per request, ``max_tokens`` minus the tokens it has generated (the
        horizon a catch-up is spread over; ``CostAwarePolicy.catch_up_share``)."""
        remaining = []
        for req_id in req_ids:
            state = self._runner.requests.get(req_id)
            max_tokens = getattr(getattr(state, "sampling_params", None), "max_tokens", None)
            remaining.append(CATCH_UP_HORIZON_TOKENS if max_tokens is None
                             else max(0, max_tokens - len(state.output_token_ids)))
        return tuple(remaining)

    @staticmethod
    def _step_starts(common_attn_metadata) -> tuple[list[int], list[int], int]:
        """Per request, the position of its first target token this step and
        the position after its last; and the longest query of the step."""
        query_start_loc = common_attn_metadata.query_start_loc_cpu
        num_reqs = common_attn_metadata.num_reqs
        # [num_reqs]
        query_lens = query_start_loc[1 : num_reqs + 1] - query_start_loc[:num_reqs]
        seq_lens = common_attn_metadata.seq_lens[:num_reqs].cpu()
        longest = int(query_lens.max()) if num_reqs else 0
        return (seq_lens - query_lens).tolist(), seq_lens.tolist(), longest

    def _skip_draft_model(self, req_ids, step_starts, step: _DraftStep):
        """No request drafts: the draft model does not run this step."""
        self.skipped_this_step = True
        self.draft_kv_holes.on_skipped(req_ids, step_starts)
        self._record_written_blocks(req_ids, step_starts)
        self._last_draft_probs = None
        self._record_metrics([[] for _ in req_ids], step.planned.tolist(), step,
                             skipped=True)
        self._last_step_end = self._clock()
        return [[] for _ in req_ids]

    def _catch_up(self, req_ids, step_starts, step: _DraftStep, batch: BatchView,
                  kwargs) -> int:
        """Run the draft over the positions missed by requests that draft now."""
        planned = step.planned.tolist()
        segments = [
            (row, step_starts[row] - missed, step_starts[row])
            for row, missed in enumerate(batch.catch_up_tokens)
            if missed > 0 and planned[row] > 0
        ]
        caught_up = {req_ids[row] for row, _, _ in segments}
        num_tokens = 0
        if segments:
            # Catch-up passes are prefill-like (many tokens per request): the
            # policy fits their cost apart from decode-regime draft passes.
            started = self._synchronized_clock()
            num_tokens = run_catch_up(
                self, kwargs["common_attn_metadata"], segments,
                self._runner.input_batch.token_ids_cpu)
            self.policy.observe_catch_up_pass(
                num_tokens, self._synchronized_clock() - started)
        self.draft_kv_holes.on_draft_pass(req_ids, step_starts, caught_up)
        # the blocks written this step: from the caught-up start where one ran
        written_from = list(step_starts)
        for row, start, _ in segments:
            written_from[row] = start
        self._record_written_blocks(req_ids, written_from)
        return num_tokens

    def _record_written_blocks(self, req_ids, written_from) -> None:
        """Mark the KV blocks this step wrote as holding draft KV or not, for
        requests that inherit them from the prefix cache (``DraftKVHoles``)."""
        for req_id, start, end, blocks in zip(req_ids, written_from, self._step_ends,
                                              self._block_rows):
            self.draft_kv_holes.record_blocks(req_id, start, end, blocks,
                                              self._kv_block_size)

    def _synchronized_clock(self) -> float:
        """Now, after the device has finished what was queued (honest timing)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return self._clock()

    def _time_target_step(self, num_scheduled_tokens: int, num_reqs: int,
                          now: float) -> None:
        """The time from the end of the last proposal to ``now`` (this one's
        start, device synchronised): one target step (and vLLM's work around
        it), for ``num_scheduled_tokens`` tokens."""
        if self._last_step_end is not None:
            self.policy.observe_target_step(num_scheduled_tokens,
                                            now - self._last_step_end, num_reqs)

    def _keep_draft_distributions(self, req_ids, lengths, step: _DraftStep) -> None:
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

    def _record_metrics(self, drafts, planned, step: _DraftStep, skipped: bool = False,
                        num_catch_up_tokens: int = 0) -> None:
        if self._counters is None:
            return
        num_reqs = len(drafts)
        discarded = self._runner.discard_request_mask.np[:num_reqs]
        kept = [i for i in range(num_reqs) if not discarded[i]]
        early = step.stopped_early.tolist()
        num_early = sum(1 for i in kept if early[i])
        entropy_stops = step.stop_on == "entropy"
        cycle_check = getattr(self.policy, "cycle_check", None)
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
        )

    # -- the hook into vLLM's draft loop --------------------------------------
    def _sample_draft_tokens(self, hidden_states, sampling_metadata):
        step = self._step
        if step is None:
            return super()._sample_draft_tokens(hidden_states, sampling_metadata)
        if self._time_later_passes:  # gammatune_cost: time the passes
            now = self._synchronized_clock()
            if self._first_pass_is_prefill:
                self.policy.observe_catch_up_pass(self._pass_tokens,
                                                  now - self._pass_started)
                self._first_pass_is_prefill = False
            else:
                self.policy.observe_draft_pass(self._pass_tokens,
                                               now - self._pass_started,
                                               hidden_states.shape[0])
            # the next pass runs over one token per request
            self._pass_started, self._pass_tokens = now, hidden_states.shape[0]
        if not step.needs_distribution:
            token_ids, probs = super()._sample_draft_tokens(hidden_states, sampling_metadata)
            distribution = None
        else:
            # [batch, vocab]
            logits = self.model.compute_logits(hidden_states)
            if self._enable_probabilistic_draft_probs and not sampling_metadata.all_greedy:
                token_ids, probs = self._sample_from_logits(logits, sampling_metadata)
            else:
                token_ids, probs = logits.argmax(dim=-1), None
            distribution = probs if probs is not None else self._draft_distribution(
                logits, sampling_metadata)
        if step.record(token_ids, probs, distribution):
            raise _EveryRequestStopped
        return token_ids, probs

    @staticmethod
    def _draft_distribution(logits: torch.Tensor, sampling_metadata) -> torch.Tensor:
        """q: the draft's softmax at each request's temperature ([batch, vocab]).

        Greedy requests use temperature 1 (the plain softmax); top-k/top-p are
        not applied to the draft, as in vLLM's own probabilistic drafting.
        """
        logits = logits.float()
        temperature = sampling_metadata.temperature
        if temperature is not None and not sampling_metadata.all_greedy:
            # [batch, 1]; vLLM marks greedy requests with a temperature <= 0
            temperature = torch.where(temperature > 0, temperature,
                                      torch.ones_like(temperature)).float()
            logits = logits / temperature[: logits.shape[0]].unsqueeze(-1)
        return torch.softmax(logits, dim=-1)
