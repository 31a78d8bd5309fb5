"""Reading vLLM's and the plugin's counters: from an ``LLM``, from one engine
among several in a process, and from a server's ``/metrics``; and the exact
counts per generated token made of them (``exact_counts``).

Every metric name the harness reads is in this module.

Why the counts are not vLLM's acceptance totals: the rejection sampler counts
every draft token verification accepts, and the scheduler then trims a
request's tokens at ``max_tokens``, so ``vllm:spec_decode_num_accepted_tokens``
includes tokens that were never generated (more of them the longer the draft).
Exact counts are made of what vLLM emitted instead: a request's target passes
are the engine steps that emitted tokens for it (vLLM observes each in its
time-to-first-token or inter-token-latency histogram, once per request and
step), and the tokens it accepted within ``max_tokens`` are its generated
tokens less those passes.
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

#: a histogram observed once per engine step that emitted tokens: its count
#: is the number of those steps
_STEPS_HISTOGRAM = "vllm:iteration_tokens_total"
#: histograms observed once per request and engine step that emitted tokens
#: for it (the first token's step, every later one): their counts summed are
#: the target passes that computed a generated token
_PASS_HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds")


def read_counters(llm) -> dict[str, float]:
    values = dict.fromkeys(_COUNTERS, 0.0)
    by_name = {m.name: m for m in llm.get_metrics()}
    for key, name in _COUNTERS.items():
        if name in by_name:
            values[key] = float(by_name[name].value)
    values["engine_steps"] = _histogram_count(by_name.get(_STEPS_HISTOGRAM))
    values["target_passes"] = sum(_histogram_count(by_name.get(name))
                                  for name in _PASS_HISTOGRAMS)
    return values


def _histogram_count(metric) -> float:
    return float(getattr(metric, "count", 0) or 0)


class EngineCounts:
    """One engine's counts, read beside the Prometheus registry.

    With several engines in one process the registry reports only the newest
    (vLLM unregisters the previous engine's metrics, and the plugin follows
    it), so ``read_counters`` cannot tell them apart. Here vLLM's
    spec-decoding stats, the engine steps that emitted tokens and the target
    passes (``IterationStats``: one first-token or inter-token entry per
    request and step that emitted tokens for it, as the histograms
    ``read_counters`` reads) are summed from the engine's own stat-logger
    calls, and the plugin's counters are read from the engine's own counter
    file.
    """

    def __init__(self, llm):
        from vllm_gammatune.methods import ADDITIONAL_CONFIG_KEY
        from vllm_gammatune.telemetry.metrics import StepCounters

        self.spec = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "engine_steps": 0,
                     "target_passes": 0}
        manager = llm.llm_engine.logger_manager
        original = manager.record

        def record(scheduler_stats, iteration_stats=None, *args, **kwargs):
            stats = getattr(scheduler_stats, "spec_decoding_stats", None)
            if stats is not None:
                self.spec["drafts"] += stats.num_drafts
                self.spec["draft_tokens"] += stats.num_draft_tokens
                self.spec["accepted"] += stats.num_accepted_tokens
            if iteration_stats is not None:
                self.spec["engine_steps"] += 1
                self.spec["target_passes"] += (len(iteration_stats.time_to_first_tokens_iter)
                                               + len(iteration_stats.inter_token_latencies_iter))
            return original(scheduler_stats, iteration_stats, *args, **kwargs)

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
    "vllm:iteration_tokens_total_count": "engine_steps",
    "vllm:time_to_first_token_seconds_count": "target_passes",
    "vllm:inter_token_latency_seconds_count": "target_passes",
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


def draft_forwards(method: str | None, k: int | None, plugin_forwards: float,
                   engine_steps: float | None) -> float | None:
    """Batched draft forwards, one unit for every method: the plugin's
    counter; vLLM's ``draft_model`` runs K forwards in every engine step that
    computes a request (``gpu_model_runner``: the drafter runs whenever the
    batch fits it), counted here as the steps that emitted tokens (a step
    that only processes part of a long prompt is missed); n-gram lookups and
    no speculation run none. None where the method, a fixed K or its steps
    are unknown.

    ``method``: the harness's method name (``methods.method_name``)."""
    from gammatune_tools.bench.methods import VLLM_FIXED_K

    if plugin_forwards:
        return plugin_forwards
    if method is None:
        return None
    if method not in VLLM_FIXED_K:
        return 0.0
    return k * engine_steps if k and engine_steps is not None else None


def exact_counts(output_tokens: float, target_passes: float | None, drafts: float,
                 forwards: float | None) -> dict[str, float | None]:
    """Counts per generated token (module docstring): target passes and
    batched draft forwards per generated token, and the accepted length,
    1 + the tokens accepted within ``max_tokens`` per verification that had
    drafts. None where a count is missing (rows measured before the target
    passes were counted; nothing generated)."""
    known = bool(output_tokens) and bool(target_passes)
    accepted = output_tokens - target_passes if known else None
    return {
        "target_passes_per_token": target_passes / output_tokens if known else None,
        "draft_forwards_per_token":
            forwards / output_tokens if output_tokens and forwards is not None else None,
        "accepted_length": 1 + accepted / drafts if known and drafts else None,
    }


def derived(delta: dict[str, float], output_tokens: int, method: str | None = None,
            k: int | None = None) -> dict[str, float | None]:
    """A served run's hardware-independent counts, from /metrics differences
    (``method``, ``k``: the harness's method name and K, for vLLM's drafter;
    without them vLLM's draft forwards are unknown)."""
    drafts, draft_tokens = delta.get("drafts", 0.0), delta.get("draft_tokens", 0.0)
    forwards = draft_forwards(method, k, delta.get("gammatune_draft_forward_passes", 0.0),
                              delta.get("engine_steps"))
    exact = exact_counts(output_tokens, delta.get("target_passes"), drafts, forwards)
    return {
        "mean_accepted_length": exact["accepted_length"],
        # of the draft tokens verified, those accepted (vLLM's rate: every
        # verified token counts, those past max_tokens too)
        "acceptance_rate": delta.get("accepted", 0.0) / draft_tokens if draft_tokens else None,
        "mean_draft_length": draft_tokens / drafts if drafts else None,
        "target_passes_per_token": exact["target_passes_per_token"],
        "draft_forwards_per_token": exact["draft_forwards_per_token"],
        "plugin_us_per_step":
            delta["gammatune_plugin_time_us"] / delta["gammatune_steps"]
            if delta.get("gammatune_plugin_time_us") and delta.get("gammatune_steps") else None,
        "plugin_time_us_per_token":  # None without the plugin's drafter
            delta["gammatune_plugin_time_us"] / output_tokens
            if delta.get("gammatune_plugin_time_us") and output_tokens else None,
    }
