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
from vllm_gammatune.telemetry.metrics import StepCounters

logger = init_logger(__name__)


class StepMetrics:
    """One drafter's counters.

    Args:
        counters: the engine's metrics file.
    """

    def __init__(self, counters: StepCounters):
        self.counters = counters

    def record_step(self, lengths: list[int], step: DraftStep, discarded,
                    num_tracked_requests: int, policy_seconds: float,
                    skipped: bool = False, num_catch_up_tokens: int = 0) -> None:
        """Count one proposal: ``lengths``, each request's draft tokens
        (input batch order), ``discarded``: [num_reqs] vLLM's mask of
        requests whose sampled token is discarded (a prompt chunk), whose
        drafts are not counted."""
        planned = step.planned_lengths
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
            num_skipped_draft_steps=int(not any(drafts)))


def attach_step_metrics(vllm_config, max_num_draft_tokens: int) -> StepMetrics | None:
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
    return StepMetrics(counters)
