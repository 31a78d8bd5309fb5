"""Reading vLLM's and the plugin's counters: from an ``LLM``, from one engine
among several in a process, and from a server's ``/metrics``.

Every metric name the harness reads is in this module.
"""

from __future__ import annotations

_COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "accepted": "vllm:spec_decode_num_accepted_tokens",
    "confidence_stops": "vllm:gammatune_confidence_stops",
    "draft_forward_passes": "vllm:gammatune_draft_forward_passes",
    "relaxed_acceptances": "vllm:gammatune_adasd_relaxed_acceptances",
    "plugin_time_us": "vllm:gammatune_plugin_time_us",
    "skipped_draft_steps": "vllm:gammatune_skipped_draft_steps",
    "catch_up_tokens": "vllm:gammatune_catch_up_tokens",
    "plugin_steps": "vllm:gammatune_steps",
    "planned_draft_tokens": "vllm:gammatune_planned_draft_tokens",
    "stopped_draft_tokens": "vllm:gammatune_stopped_draft_tokens",
}

#: gammatune_cost's gauge: the scale of its drafting (``Measurement.drafting_scale``)
DRAFTING_SCALE = "vllm:gammatune_cost_drafting_scale"


def read_gauge(llm, name: str) -> float | None:
    """A gauge's current value (None when the engine does not export it)."""
    return next((float(m.value) for m in llm.get_metrics() if m.name == name), None)


#: a histogram observed once per engine step: its count is the number of steps
_STEPS_HISTOGRAM = "vllm:iteration_tokens_total"


def read_counters(llm) -> dict[str, float]:
    values = dict.fromkeys(_COUNTERS, 0.0)
    by_name = {m.name: m for m in llm.get_metrics()}
    for key, name in _COUNTERS.items():
        if name in by_name:
            values[key] = float(by_name[name].value)
    steps = by_name.get(_STEPS_HISTOGRAM)
    values["engine_steps"] = float(getattr(steps, "count", 0) or 0)
    return values


class EngineCounts:
    """One engine's counts, read beside the Prometheus registry.

    With several engines in one process the registry reports only the newest
    (vLLM unregisters the previous engine's metrics, and the plugin follows
    it), so ``read_counters`` cannot tell them apart. Here vLLM's
    spec-decoding stats are summed from the engine's own stat-logger calls and
    the plugin's counters are read from the engine's own counter file.
    """

    def __init__(self, llm):
        from vllm_gammatune.methods import ADDITIONAL_CONFIG_KEY
        from vllm_gammatune.telemetry.metrics import StepCounters

        self.spec = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
        manager = llm.llm_engine.logger_manager
        original = manager.record

        def record(scheduler_stats, *args, **kwargs):
            stats = getattr(scheduler_stats, "spec_decoding_stats", None)
            if stats is not None:
                self.spec["drafts"] += stats.num_drafts
                self.spec["draft_tokens"] += stats.num_draft_tokens
                self.spec["accepted"] += stats.num_accepted_tokens
            return original(scheduler_stats, *args, **kwargs)

        manager.record = record
        plugin = (llm.llm_engine.vllm_config.additional_config or {}).get(ADDITIONAL_CONFIG_KEY)
        self.plugin = None if plugin is None else StepCounters.attach(
            plugin["metrics_path"], plugin["settings"]["num_speculative_tokens"])

    def read(self) -> dict[str, float]:
        """vLLM's spec-decoding counts and every plugin counter by its count
        name (``Metric.count``: all of ``METRICS``, so a new counter reaches
        the rows without a change here); 0 without the plugin."""
        from vllm_gammatune.telemetry.metrics import plugin_counts

        plugin = self.plugin.counts() if self.plugin is not None else plugin_counts(())
        return {**self.spec, **plugin}


#: /metrics names -> result keys (counters are summed over label sets)
SCRAPED = {
    "vllm:spec_decode_num_drafts_total": "drafts",
    "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens_total": "accepted",
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:gammatune_draft_length_sum": "gammatune_draft_length_sum",
    "vllm:gammatune_draft_length_count": "gammatune_draft_length_count",
    "vllm:gammatune_planned_draft_tokens_total": "gammatune_planned_draft_tokens",
    "vllm:gammatune_confidence_stops_total": "gammatune_confidence_stops",
    "vllm:gammatune_draft_forward_passes_total": "gammatune_draft_forward_passes",
    "vllm:gammatune_plugin_time_us_total": "gammatune_plugin_time_us",
    "vllm:gammatune_adasd_entropy_stops_total": "gammatune_adasd_entropy_stops",
    "vllm:gammatune_adasd_relaxed_acceptances_total": "gammatune_adasd_relaxed_acceptances",
    "vllm:gammatune_skipped_draft_steps_total": "gammatune_skipped_draft_steps",
    "vllm:gammatune_catch_up_tokens_total": "gammatune_catch_up_tokens",
    "vllm:gammatune_steps_total": "gammatune_steps",
    "vllm:gammatune_ngram_draft_tokens_total": "gammatune_ngram_draft_tokens",
    "vllm:gammatune_ngram_accepted_tokens_total": "gammatune_ngram_accepted_tokens",
}


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {result key: value summed over label sets} for ``SCRAPED``."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in SCRAPED:
            key = SCRAPED[name]
            values[key] = values.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return values


def metrics_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}


def derived(delta: dict[str, float], output_tokens: int) -> dict[str, float | None]:
    """The offline harness's hardware-independent counts, from /metrics differences."""
    drafts, draft_tokens = delta.get("drafts", 0.0), delta.get("draft_tokens", 0.0)
    accepted = delta.get("accepted", 0.0)
    forwards = delta.get("gammatune_draft_forward_passes", 0.0)
    return {
        "mean_accepted_length": 1 + accepted / drafts if drafts else None,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "mean_draft_length": draft_tokens / drafts if drafts else None,
        "target_passes_per_token":
            (output_tokens - accepted) / output_tokens if output_tokens else None,
        "draft_forward_passes_per_token":
            forwards / output_tokens if forwards and output_tokens else None,
        "plugin_us_per_step":
            delta["gammatune_plugin_time_us"] / delta["gammatune_steps"]
            if delta.get("gammatune_plugin_time_us") and delta.get("gammatune_steps") else None,
        "plugin_time_us_per_token":  # None without the plugin's drafter
            delta["gammatune_plugin_time_us"] / output_tokens
            if delta.get("gammatune_plugin_time_us") and output_tokens else None,
    }
