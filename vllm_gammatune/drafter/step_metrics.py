"""What the drafter counts per step into the plugin's metrics (rank-0 worker).

The front end made the metrics file and put its path into the plugin's part
of ``additional_config`` (``integration.engine_config``); the rank-0 worker
attaches to it (``attach_step_metrics``) and adds one step after each
proposal (``StepMetrics.record_step``). The other ranks count nothing: every
rank drafts the same.
"""

from __future__ import annotations

from vllm.logger import init_logger
from vllm_gammatune.drafter.draft_step import DraftStep
from vllm_gammatune.methods import plugin_section
from vllm_gammatune.policies import DraftLengthPolicy, ExplainsSteps
from vllm_gammatune.telemetry.metrics import StepCounters

logger = init_logger(__name__)


class StepMetrics:
    """One drafter's counters, and the drafting scale it last reported.

    Args:
        counters: the engine's metrics file.
        policy: the drafter's policy, whose check against the clock (an
            ``ExplainsSteps``'s ``drafting_scale``) gives the drafting scale.
    """

    def __init__(self, counters: StepCounters, policy: DraftLengthPolicy):
        self.counters = counters
        self._policy = policy
        #: the drafting scale the metrics report: the last one with evidence
        self._reported_drafting_scale = 1.0

    def record_step(self, drafts: list[list[int]], step: DraftStep, discarded,
                    num_tracked_requests: int, policy_seconds: float,
                    skipped: bool = False, num_catch_up_tokens: int = 0) -> None:
        """Count one proposal: ``drafts`` per request (input batch order),
        ``discarded``: [num_reqs] vLLM's mask of requests whose sampled token
        is discarded (a prompt chunk), whose drafts are not counted."""
        num_reqs = len(drafts)
        planned = step.planned_lengths
        lengths = list(map(len, drafts))
        if discarded.any():  # a numpy mask: read once, not per request
            kept = [i for i, gone in enumerate(discarded.tolist()) if not gone]
            lengths, planned = [lengths[i] for i in kept], [planned[i] for i in kept]
            early = [step.stopped_early_host[i] for i in kept] if step.stopped_early_host else []
        else:
            early = step.stopped_early_host
        num_early = sum(early) if early else 0
        num_stopped_tokens = (sum(k - n for k, n, e in zip(planned, lengths, early) if e)
                              if num_early else 0)
        entropy_stops = step.stop_on == "entropy"
        self.counters.record_step(
            lengths,
            sum(planned),
            0 if entropy_stops else num_early,
            num_tracked_requests,
            num_draft_forward_passes=len(step.token_ids),
            num_entropy_stops=num_early if entropy_stops else 0,
            policy_seconds=policy_seconds,
            num_skipped_draft_steps=int(skipped),
            num_catch_up_tokens=num_catch_up_tokens,
            drafting_scale=self._drafting_scale(num_reqs),
            num_stopped_draft_tokens=num_stopped_tokens,
        )

    def record_lookup_step(self, drafts: list[list[int]], planned: list[int], discarded,
                           num_tracked_requests: int, policy_seconds: float) -> None:
        """Count one proposal of a drafter that runs no model (n-gram):
        ``planned`` per request, what the policy allowed; no draft forward
        pass, no stop, nothing to catch up."""
        kept = [i for i in range(len(drafts)) if not discarded[i]]
        self.counters.record_step(
            [len(drafts[i]) for i in kept], sum(planned[i] for i in kept), 0,
            num_tracked_requests, policy_seconds=policy_seconds,
            num_skipped_draft_steps=int(not any(drafts)),
            drafting_scale=self._drafting_scale(len(drafts)))

    def _drafting_scale(self, num_reqs: int) -> float | None:
        """The drafting scale to report, None for a policy without a check
        against the clock. The gauge keeps the last scale the check had
        evidence for: the tail of a burst (fewer requests, few cycles) does
        not reset it."""
        policy = self._policy
        checked = (policy.drafting_scale(num_reqs) if isinstance(policy, ExplainsSteps)
                   else None)
        if checked is None:
            return None
        scale, informed = checked
        if informed:
            self._reported_drafting_scale = scale
        return self._reported_drafting_scale


def attach_step_metrics(vllm_config, max_num_draft_tokens: int,
                        policy: DraftLengthPolicy) -> StepMetrics | None:
    """The rank-0 worker's ``StepMetrics`` on the engine's metrics file, or
    None (another rank, no metrics file, or a file it cannot use)."""
    metrics_path = plugin_section(vllm_config.additional_config).get("metrics_path")
    if not metrics_path or vllm_config.parallel_config.rank != 0:
        return None
    try:
        counters = StepCounters.attach(metrics_path, max_num_draft_tokens)
    except (OSError, ValueError) as exc:
        # Another node, or a front end of another plugin version: the
        # plugin's metrics are lost, the engine runs on.
        logger.warning("vllm-gammatune: metrics file unusable (%s); the "
                       "plugin's own metrics are off", exc)
        return None
    return StepMetrics(counters, policy)
