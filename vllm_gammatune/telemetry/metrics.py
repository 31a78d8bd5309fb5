"""The plugin's own metrics, beside vLLM's ``vllm:spec_decode_*``.

vLLM's counters (drafts, draft tokens, accepted tokens, per position) stay as
they are: the plugin hands the scheduler per-request draft lists, and vLLM
counts them itself.

The plugin adds, per engine:

- ``vllm:gammatune_draft_length`` (histogram): tokens actually drafted per
  request per step (after confidence stops), so its mean is the mean draft
  length and its buckets the distribution;
- ``vllm:gammatune_planned_draft_tokens`` (counter): tokens the policy asked
  for; planned minus drafted is what confidence stops saved;
- ``vllm:gammatune_confidence_stops`` (counter): drafts ended early because
  the draft's top probability fell below the threshold;
- ``vllm:gammatune_stopped_draft_tokens`` (counter): draft tokens a
  per-token stop cut from the planned drafts (a confidence or entropy
  threshold, or ``gammatune_cost``'s rule that the next token would not
  pay); for ``gammatune_cost``, whose drafts may run to the cap, its share
  of the planned tokens is the share the rule stopped;
- ``vllm:gammatune_draft_forward_passes`` (counter): batched draft-model
  forwards the drafter ran (vLLM's fixed-K drafter runs K per step);
- ``vllm:gammatune_tracked_requests`` (gauge): requests with policy state in
  the worker;
- ``vllm:gammatune_plugin_time_us`` (counter): microseconds in the plugin's
  own drafter code (its overhead, apart from the draft model);
- ``gammatune_cost`` only: ``vllm:gammatune_cost_drafting_scale`` (gauge),
  the measured efficiency of drafted steps against skipped ones relative to
  the cost model, at the batch size of the last step where the check had
  evidence (enough drafted cycles; 1 before any: the model holds;
  below 1: drafting did worse than modelled and the policy discounts it;
  ``policies.cycle_check``);
- ``vllm:gammatune_info`` (gauge, 1): present once the rank-0 worker has
  confirmed that it built the plugin's drafter, labelled with the method,
  the runner (``v1``) and the drafter class; absent before, so a scrape
  that lacks it means the plugin is not (yet) drafting for this engine;
- AdaSD only: ``vllm:gammatune_adasd_entropy_stops`` and
  ``..._relaxed_acceptances`` (counters), ``..._mean_generation_threshold``
  and ``..._mean_verification_threshold`` (gauges, mean over verifications).

Transport. The numbers are made in the worker (the drafter), but
``LLM.get_metrics()`` and ``/metrics`` read the Prometheus registry of the
front-end process, and vLLM's stats messages between the processes have a
fixed schema. So the front end creates a small file of int64 counters
(``StepCounters.create``), passes its path to the workers inside
``additional_config``, the rank-0 worker updates it in place through ``mmap``,
and a Prometheus collector in the front end reads it at scrape time. One
writer, readers tolerate a torn read of a single counter (it is monotonic).
This works wherever the front end and the rank-0 worker share a file system
(one machine, including Ray and multiprocess executors on one node).
"""

from __future__ import annotations

import atexit
import mmap
import os
import struct
import tempfile
import threading
import uuid

_HEADER_FIELDS = (
    "num_drafts",
    "num_draft_tokens",
    "num_planned_draft_tokens",
    "num_confidence_stops",
    "tracked_requests",
    "num_draft_forward_passes",
    "num_entropy_stops",
    "num_relaxed_acceptances",
    "generation_threshold_micro_sum",
    "verification_threshold_micro_sum",
    "num_threshold_samples",
    "plugin_micros",
    "num_skipped_draft_steps",
    "num_catch_up_tokens",
    "num_steps",
    "drafting_scale_milli",
    "drafter_confirmed",
    "num_stopped_draft_tokens",
)
#: header field -> its slot in the file (fields are addressed by name)
_SLOT = {name: slot for slot, name in enumerate(_HEADER_FIELDS)}
_INT64 = struct.Struct("<q")


class StepCounters:
    """int64 counters in a memory-mapped file: header fields, then a histogram
    ``draft_length_counts[0..max_num_draft_tokens]``."""

    def __init__(self, path: str, max_num_draft_tokens: int, *, owner: bool):
        self.path = path
        self.max_num_draft_tokens = max_num_draft_tokens
        self._num_fields = len(_HEADER_FIELDS) + max_num_draft_tokens + 1
        size = self._num_fields * _INT64.size
        if owner:
            with open(path, "wb") as f:
                f.write(b"\0" * size)
        elif os.path.getsize(path) != size:
            raise ValueError(
                f"counter file {path} has {os.path.getsize(path)} bytes, this "
                f"plugin version expects {size}"
            )
        self._file = open(path, "r+b")
        self._map = mmap.mmap(self._file.fileno(), size)
        self._owner = owner

    @classmethod
    def create(cls, max_num_draft_tokens: int) -> StepCounters:
        path = os.path.join(
            tempfile.gettempdir(), f"vllm_gammatune_{os.getpid()}_{uuid.uuid4().hex}"
        )
        counters = cls(path, max_num_draft_tokens, owner=True)
        atexit.register(counters.remove)
        return counters

    @classmethod
    def attach(cls, path: str, max_num_draft_tokens: int) -> StepCounters:
        return cls(path, max_num_draft_tokens, owner=False)

    def _read(self, slot: int) -> int:
        return _INT64.unpack_from(self._map, slot * _INT64.size)[0]

    def _add_at(self, slot: int, value: int) -> None:
        offset = slot * _INT64.size
        _INT64.pack_into(self._map, offset, _INT64.unpack_from(self._map, offset)[0] + value)

    def _add(self, field: str, value: int) -> None:
        """Add to the header field named ``field`` (one of ``_HEADER_FIELDS``)."""
        self._add_at(_SLOT[field], value)

    def _set(self, field: str, value: int) -> None:
        _INT64.pack_into(self._map, _SLOT[field] * _INT64.size, value)

    def record_step(
        self,
        num_draft_tokens_per_request: list[int],
        num_planned_draft_tokens: int,
        num_confidence_stops: int,
        tracked_requests: int,
        num_draft_forward_passes: int = 0,
        num_entropy_stops: int = 0,
        policy_seconds: float | None = None,
        num_skipped_draft_steps: int = 0,
        num_catch_up_tokens: int = 0,
        drafting_scale: float | None = None,
        num_stopped_draft_tokens: int = 0,
    ) -> None:
        """Add one drafting step (one entry per request that drafted)."""
        base = len(_HEADER_FIELDS)  # the histogram follows the header
        for length in num_draft_tokens_per_request:
            self._add_at(base + min(length, self.max_num_draft_tokens), 1)
        self._add("num_drafts", len(num_draft_tokens_per_request))
        self._add("num_draft_tokens", sum(num_draft_tokens_per_request))
        self._add("num_planned_draft_tokens", num_planned_draft_tokens)
        self._add("num_confidence_stops", num_confidence_stops)
        self._set("tracked_requests", tracked_requests)
        self._add("num_draft_forward_passes", num_draft_forward_passes)
        self._add("num_entropy_stops", num_entropy_stops)
        if policy_seconds is not None:
            self._set("plugin_micros", round(policy_seconds * 1e6))
        self._add("num_skipped_draft_steps", num_skipped_draft_steps)
        self._add("num_catch_up_tokens", num_catch_up_tokens)
        self._add("num_steps", 1)
        self._add("num_stopped_draft_tokens", num_stopped_draft_tokens)
        if drafting_scale is not None:
            self._set("drafting_scale_milli", round(drafting_scale * 1000))

    def mark_drafter_confirmed(self) -> None:
        """The worker confirmed it built the plugin's drafter (``runner_choice``)."""
        self._set("drafter_confirmed", 1)

    def set_tracked_requests(self, tracked_requests: int) -> None:
        """The number of requests with policy state, between drafting steps."""
        self._set("tracked_requests", tracked_requests)

    def record_verification(
        self,
        num_relaxed_acceptances: int,
        generation_thresholds: list[float],
        verification_thresholds: list[float],
    ) -> None:
        """AdaSD: relaxed acceptances and the thresholds in force (one per request)."""
        self._add("num_relaxed_acceptances", num_relaxed_acceptances)
        finite = [t for t in generation_thresholds if t != float("inf")]
        self._add("generation_threshold_micro_sum", round(sum(finite) * 1e6))
        self._add("verification_threshold_micro_sum", round(sum(verification_thresholds) * 1e6))
        self._add("num_threshold_samples", len(verification_thresholds))

    def snapshot(self) -> dict[str, object]:
        values = {name: self._read(i) for i, name in enumerate(_HEADER_FIELDS)}
        base = len(_HEADER_FIELDS)
        values["draft_length_counts"] = [
            self._read(base + k) for k in range(self.max_num_draft_tokens + 1)
        ]
        return values

    def remove(self) -> None:
        try:
            self._map.close()
            self._file.close()
        finally:
            if self._owner and os.path.exists(self.path):
                os.unlink(self.path)


class _PrometheusCollector:
    """Reads every live engine's counters at scrape time (front end only)."""

    def __init__(self):
        #: engine -> (counters, model_name, method)
        self._engines: dict[str, tuple[StepCounters, str, str]] = {}
        self._lock = threading.Lock()

    def add(self, engine: str, counters: StepCounters, model_name: str, method: str) -> None:
        with self._lock:
            self._engines[engine] = (counters, model_name, method)

    def collect(self):
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        labels = ["model_name", "engine"]
        length = HistogramMetricFamily(
            "vllm:gammatune_draft_length",
            "Tokens drafted per request per step by vllm-gammatune's adaptive "
            "methods (after confidence stops).",
            labels=labels,
        )
        planned = CounterMetricFamily(
            "vllm:gammatune_planned_draft_tokens",
            "Draft tokens the draft-length policy asked for.",
            labels=labels,
        )
        stops = CounterMetricFamily(
            "vllm:gammatune_confidence_stops",
            "Drafts ended early because the draft's top probability fell below "
            "the confidence threshold.",
            labels=labels,
        )
        entropy_stops = CounterMetricFamily(
            "vllm:gammatune_adasd_entropy_stops",
            "AdaSD drafts ended because the draft entropy exceeded T_G.",
            labels=labels,
        )
        relaxed = CounterMetricFamily(
            "vllm:gammatune_adasd_relaxed_acceptances",
            "AdaSD draft tokens accepted although they differ from the target's "
            "(JS distance below T_V): the lossy part.",
            labels=labels,
        )
        mean_tg = GaugeMetricFamily(
            "vllm:gammatune_adasd_mean_generation_threshold",
            "AdaSD: mean T_G (bits) over all verifications so far.",
            labels=labels,
        )
        mean_tv = GaugeMetricFamily(
            "vllm:gammatune_adasd_mean_verification_threshold",
            "AdaSD: mean T_V over all verifications so far.",
            labels=labels,
        )
        plugin_seconds = CounterMetricFamily(
            # microseconds, not seconds: LLM.get_metrics() reads counters as ints
            "vllm:gammatune_plugin_time_us",
            "Microseconds in the plugin's own drafter code (planning, observing, "
            "cutting drafts), not in the draft model.",
            labels=labels,
        )
        forwards = CounterMetricFamily(
            "vllm:gammatune_draft_forward_passes",
            "Batched forward passes of the draft model run by the plugin's drafter.",
            labels=labels,
        )
        skipped = CounterMetricFamily(
            "vllm:gammatune_skipped_draft_steps",
            "Engine steps where no request drafted and the draft model did not run "
            "(gammatune_cost).",
            labels=labels,
        )
        catch_up = CounterMetricFamily(
            "vllm:gammatune_catch_up_tokens",
            "Positions the draft model processed to catch up after skipped steps.",
            labels=labels,
        )
        stopped_tokens = CounterMetricFamily(
            "vllm:gammatune_stopped_draft_tokens",
            "Draft tokens a per-token stop cut from the planned drafts (confidence or "
            "entropy threshold, or gammatune_cost's rule that the next token would not pay).",
            labels=labels,
        )
        steps = CounterMetricFamily(
            "vllm:gammatune_steps",
            "Engine steps seen by the plugin's drafter (plugin_time_us / steps = "
            "the plugin's own time per step).",
            labels=labels,
        )
        drafting_scale = GaugeMetricFamily(
            "vllm:gammatune_cost_drafting_scale",
            "gammatune_cost: measured efficiency of drafted steps over skipped ones, "
            "relative to the cost model, at the batch size of the last step with enough "
            "measured cycles (1: the model holds; below 1: drafting is discounted by this "
            "factor).",
            labels=labels,
        )
        tracked = GaugeMetricFamily(
            "vllm:gammatune_tracked_requests",
            "Requests with draft-length state held by the plugin.",
            labels=labels,
        )
        info = GaugeMetricFamily(
            "vllm:gammatune_info",
            "1 once the worker confirmed it runs vllm-gammatune's drafter: the "
            "method, the model runner and the drafter class.",
            labels=[*labels, "method", "runner", "drafter"],
        )
        with self._lock:
            engines = list(self._engines.items())
        for engine, (counters, model_name, method) in engines:
            try:
                snap = counters.snapshot()
            except ValueError:  # closed
                continue
            label_values = [model_name, engine]
            cumulative, buckets = 0, []
            for k, count in enumerate(snap["draft_length_counts"]):
                cumulative += count
                buckets.append((str(float(k)), cumulative))
            buckets.append(("+Inf", cumulative))
            length.add_metric(label_values, buckets, float(snap["num_draft_tokens"]))
            planned.add_metric(label_values, snap["num_planned_draft_tokens"])
            stops.add_metric(label_values, snap["num_confidence_stops"])
            tracked.add_metric(label_values, snap["tracked_requests"])
            forwards.add_metric(label_values, snap["num_draft_forward_passes"])
            entropy_stops.add_metric(label_values, snap["num_entropy_stops"])
            relaxed.add_metric(label_values, snap["num_relaxed_acceptances"])
            samples = max(1, snap["num_threshold_samples"])
            mean_tg.add_metric(label_values, snap["generation_threshold_micro_sum"] / 1e6 / samples)
            mean_tv.add_metric(label_values, snap["verification_threshold_micro_sum"] / 1e6 / samples)
            plugin_seconds.add_metric(label_values, snap["plugin_micros"])
            skipped.add_metric(label_values, snap["num_skipped_draft_steps"])
            catch_up.add_metric(label_values, snap["num_catch_up_tokens"])
            steps.add_metric(label_values, snap["num_steps"])
            stopped_tokens.add_metric(label_values, snap["num_stopped_draft_tokens"])
            if snap["drafter_confirmed"]:
                info.add_metric([*label_values, method, "v1", "AdaptiveDraftModelProposer"], 1)
            if snap["drafting_scale_milli"]:
                drafting_scale.add_metric(label_values, snap["drafting_scale_milli"] / 1000)
        yield from (length, planned, stops, forwards, tracked, entropy_stops, relaxed,
                    mean_tg, mean_tv, plugin_seconds, skipped, catch_up, steps,
                    stopped_tokens, drafting_scale, info)


_collector: _PrometheusCollector | None = None


def register_engine_counters(counters: StepCounters, model_name: str, method: str) -> None:
    """Expose an engine's counters on this process's Prometheus registry.

    Like vLLM, which unregisters the previous engine's metrics when a new
    engine starts in the same process, only the newest engine is reported
    (with vLLM's own labels: ``model_name`` and ``engine="0"``).
    """
    global _collector
    from prometheus_client import REGISTRY

    if _collector is None:
        _collector = _PrometheusCollector()
        REGISTRY.register(_collector)
    forget_engine_counters()
    _collector.add("0", counters, model_name, method)


def forget_engine_counters() -> None:
    """Stop reporting earlier engines (a new engine without the plugin starts)."""
    if _collector is not None:
        with _collector._lock:
            _collector._engines.clear()
