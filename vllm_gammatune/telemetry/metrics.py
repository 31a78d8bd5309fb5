"""The plugin's own metrics, beside vLLM's ``vllm:spec_decode_*``.

vLLM's counters (drafts, draft tokens, accepted tokens, per position) stay as
they are: the plugin hands the scheduler per-request draft lists, and vLLM
counts them itself. The plugin's own metrics are declared once, in
``METRICS``: each ``Metric`` gives its Prometheus name, kind, help text, the
field of the counter file it reads and how that field is scaled. The file's
layout (``FIELDS``), the Prometheus collector (``telemetry.prometheus``) and
the reading side (``plugin_counts`` and ``plugin_gauges`` for
``LLM.get_metrics()``, ``StepCounters.counts`` for the file) are derived from
that table.

Transport. The numbers are made in the worker (the drafter), but
``LLM.get_metrics()`` and ``/metrics`` read the Prometheus registry of the
front-end process, and vLLM's stats messages between the processes have a
fixed schema. So the front end creates a small file of int64 counters
(``StepCounters.create``), passes its path to the workers inside
``additional_config``, the rank-0 worker of each engine core updates it in
place through ``mmap``, and a Prometheus collector in the front end
(``telemetry.prometheus``) reads it at scrape time. This works wherever the
front end and the rank-0 workers share a file system (one machine, including
Ray and multiprocess executors on one node).

Several writers: a lock, not a file per engine. With data parallelism every
engine core has its own rank-0 worker, and all of them attach the one file
the front end passed. Each write (one step, one verification) holds an
exclusive ``fcntl.flock`` on the file around its read-modify-write, so no
update is lost; a scrape holds a shared lock, so it sees whole steps. The
file then holds the sum over engines: counters add, and so do the per-writer
totals a writer would otherwise overwrite (``tracked_requests``, the
plugin's time): each writer adds the change of its own total.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import mmap
import os
import struct
import tempfile
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One metric of the plugin, and where its value comes from."""

    #: Prometheus name (``vllm:gammatune_*``)
    name: str
    #: "counter", "gauge" or "histogram"
    kind: str
    help: str
    #: the counter-file field it reads (a histogram: its sum; its buckets are
    #: the file's draft-length histogram)
    field: str
    #: its name among the plugin's counts (``plugin_counts``, ``StepCounters.counts``)
    count: str
    #: the field holds ``round(value * scale)``
    scale: float = 1
    #: a mean: the field (a sum) over this field (the number of samples)
    per: str | None = None
    #: reported only once the field is non-zero
    when_set: bool = False
    #: labels beside vLLM's ``model_name`` and ``engine`` (``prometheus.INFO_LABELS``)
    labels: tuple[str, ...] = ()

    def value(self, fields: Mapping[str, int]) -> int | float | None:
        """Its value from the file's fields (None: not reported)."""
        raw = fields[self.field]
        if self.when_set and not raw:
            return None
        if self.per is not None:
            return raw / self.scale / max(1, fields[self.per])
        return raw if self.scale == 1 else raw / self.scale


#: Every metric of the plugin, in the order a scrape lists them.
METRICS: tuple[Metric, ...] = (
    Metric("vllm:gammatune_draft_length", "histogram",
           "Tokens drafted per request per step by vllm-gammatune's adaptive "
           "methods (after confidence stops).",
           "num_draft_tokens", "draft_length"),
    Metric("vllm:gammatune_planned_draft_tokens", "counter",
           "Draft tokens the draft-length policy asked for.",
           "num_planned_draft_tokens", "planned_draft_tokens"),
    Metric("vllm:gammatune_confidence_stops", "counter",
           "Drafts ended early because the draft's top probability fell below "
           "the confidence threshold.",
           "num_confidence_stops", "confidence_stops"),
    Metric("vllm:gammatune_draft_forward_passes", "counter",
           "Batched forward passes of the draft model run by the plugin's drafter.",
           "num_draft_forward_passes", "draft_forward_passes"),
    Metric("vllm:gammatune_tracked_requests", "gauge",
           "Requests with draft-length state held by the plugin.",
           "tracked_requests", "tracked_requests"),
    Metric("vllm:gammatune_adasd_entropy_stops", "counter",
           "AdaSD drafts ended because the draft entropy exceeded T_G.",
           "num_entropy_stops", "entropy_stops"),
    Metric("vllm:gammatune_adasd_relaxed_acceptances", "counter",
           "AdaSD draft tokens accepted although they differ from the target's "
           "(JS distance below T_V): the lossy part.",
           "num_relaxed_acceptances", "relaxed_acceptances"),
    Metric("vllm:gammatune_adasd_mean_generation_threshold", "gauge",
           "AdaSD: mean T_G (bits) over all verifications so far.",
           "generation_threshold_micro_sum", "mean_generation_threshold",
           scale=1e6, per="num_threshold_samples"),
    Metric("vllm:gammatune_adasd_mean_verification_threshold", "gauge",
           "AdaSD: mean T_V over all verifications so far.",
           "verification_threshold_micro_sum", "mean_verification_threshold",
           scale=1e6, per="num_threshold_samples"),
    # microseconds, not seconds: LLM.get_metrics() reads counters as ints
    Metric("vllm:gammatune_plugin_time_us", "counter",
           "Microseconds in the plugin's own drafter code (planning, observing, "
           "cutting drafts), not in the draft model.",
           "plugin_micros", "plugin_time_us"),
    Metric("vllm:gammatune_skipped_draft_steps", "counter",
           "Engine steps where no request drafted and the draft model did not run "
           "(gammatune_cost; with the n-gram drafter, steps without a verified draft).",
           "num_skipped_draft_steps", "skipped_draft_steps"),
    Metric("vllm:gammatune_catch_up_tokens", "counter",
           "Positions the draft model processed to catch up after skipped steps.",
           "num_catch_up_tokens", "catch_up_tokens"),
    Metric("vllm:gammatune_steps", "counter",
           "Engine steps seen by the plugin's drafter (plugin_time_us / steps = "
           "the plugin's own time per step).",
           "num_steps", "plugin_steps"),
    Metric("vllm:gammatune_stopped_draft_tokens", "counter",
           "Draft tokens a per-token stop cut from the planned drafts (confidence or "
           "entropy threshold, or gammatune_cost's rule that the next token would not pay).",
           "num_stopped_draft_tokens", "stopped_draft_tokens"),
    Metric("vllm:gammatune_ngram_draft_tokens", "counter",
           "Draft tokens from the n-gram lookup verified ahead of the draft model "
           "(drafter 'ngram+draft_model'; the draft model's are vLLM's "
           "spec_decode_num_draft_tokens minus these).",
           "num_ngram_draft_tokens", "ngram_draft_tokens"),
    Metric("vllm:gammatune_ngram_accepted_tokens", "counter",
           "Of the n-gram lookup's draft tokens verified ahead of the draft model, "
           "those accepted.",
           "num_ngram_accepted_tokens", "ngram_accepted_tokens"),
    Metric("vllm:gammatune_info", "gauge",
           "1 once the worker confirmed it runs vllm-gammatune's drafter: the "
           "method, the model runner and the drafter class.",
           "drafter_confirmed", "drafter_confirmed", when_set=True,
           labels=("method", "runner", "drafter")),
)

#: The counter file's int64 fields, in file order; the draft-length
#: histogram (``draft_length_counts[0..max_num_draft_tokens]``) follows them.
FIELDS: tuple[str, ...] = tuple(dict.fromkeys(
    name for metric in METRICS for name in (metric.field, metric.per) if name))
_SLOT = {name: slot for slot, name in enumerate(FIELDS)}
_SCALE = {metric.field: metric.scale for metric in METRICS}
_INT64 = struct.Struct("<q")


def plugin_counts(metrics: Iterable) -> dict[str, float]:
    """The plugin's counters by count name (``Metric.count``), from
    ``LLM.get_metrics()``-style values (each with ``.name`` and ``.value``);
    0.0 for a counter the engine does not export."""
    return _values_by_count(metrics, "counter", 0.0)


def plugin_gauges(metrics: Iterable) -> dict[str, float | None]:
    """The plugin's gauges by count name, like ``plugin_counts``; None for a
    gauge the engine does not export (or not yet)."""
    return _values_by_count(metrics, "gauge", None)


def _values_by_count(metrics: Iterable, kind: str, absent: float | None) -> dict:
    by_name = {m.name: m for m in metrics}
    return {metric.count: float(by_name[metric.name].value) if metric.name in by_name
            else absent for metric in METRICS if metric.kind == kind}


class StepCounters:
    """int64 counters in a memory-mapped file: ``FIELDS``, then a histogram
    ``draft_length_counts[0..max_num_draft_tokens]``."""

    def __init__(self, path: str, max_num_draft_tokens: int, *, owner: bool):
        self.path = path
        self.max_num_draft_tokens = max_num_draft_tokens
        size = (len(FIELDS) + max_num_draft_tokens + 1) * _INT64.size
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
        #: this writer's own totals of the fields that sum over writers
        self._own_totals: dict[str, int] = {}
        self._thread_lock = threading.Lock()
        #: every field, then the histogram: the whole file
        self._block = struct.Struct(f"<{size // _INT64.size}q")

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

    @contextlib.contextmanager
    def _locked(self, operation: int = fcntl.LOCK_EX) -> Iterator[None]:
        """Hold the file's lock (exclusive: writing; shared: reading), which
        every process's ``StepCounters`` on this file takes."""
        with self._thread_lock:
            fcntl.flock(self._file.fileno(), operation)
            try:
                yield
            finally:
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)

    def _read(self, slot: int) -> int:
        return _INT64.unpack_from(self._map, slot * _INT64.size)[0]

    def _add_at(self, slot: int, value: int) -> None:
        offset = slot * _INT64.size
        _INT64.pack_into(self._map, offset, _INT64.unpack_from(self._map, offset)[0] + value)

    def _add(self, field: str, value: int) -> None:
        """Add to the field named ``field`` (one of ``FIELDS``)."""
        self._add_at(_SLOT[field], value)

    def _set(self, field: str, value: int) -> None:
        _INT64.pack_into(self._map, _SLOT[field] * _INT64.size, value)

    def _add_scaled(self, field: str, value: float) -> None:
        self._add(field, round(value * _SCALE[field]))

    def _set_own_total(self, field: str, total: int) -> None:
        """Make this writer's share of ``field`` ``total`` (the file sums writers)."""
        self._add(field, self._own_change(field, total))

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
        num_stopped_draft_tokens: int = 0,
    ) -> None:
        """Add one drafting step (one entry per request that drafted).

        ``policy_seconds``: the drafter's own time so far (a total).
        """
        cap = self.max_num_draft_tokens
        # [K + 1] the step's requests by draft length, added after the fields
        histogram = [0] * (cap + 1)
        for length in num_draft_tokens_per_request:
            histogram[length if length < cap else cap] += 1
        added = {"num_draft_tokens": sum(num_draft_tokens_per_request),
                 "num_planned_draft_tokens": num_planned_draft_tokens,
                 "num_confidence_stops": num_confidence_stops,
                 "num_draft_forward_passes": num_draft_forward_passes,
                 "num_entropy_stops": num_entropy_stops,
                 "num_skipped_draft_steps": num_skipped_draft_steps,
                 "num_catch_up_tokens": num_catch_up_tokens, "num_steps": 1,
                 "num_stopped_draft_tokens": num_stopped_draft_tokens,
                 "tracked_requests": self._own_change("tracked_requests", tracked_requests)}
        if policy_seconds is not None:
            # the metric counts microseconds
            added["plugin_micros"] = self._own_change("plugin_micros",
                                                      round(policy_seconds * 1e6))
        # once a step: the whole block read and written once
        with self._locked():
            values = list(self._block.unpack_from(self._map))
            for field, value in added.items():
                values[_SLOT[field]] += value
            for length, count in enumerate(histogram, start=len(FIELDS)):
                values[length] += count
            self._block.pack_into(self._map, 0, *values)

    def _own_change(self, field: str, total: int) -> int:
        """What makes this writer's share of ``field`` ``total`` (the file
        sums writers): the change to add."""
        change = total - self._own_totals.get(field, 0)
        self._own_totals[field] = total
        return change

    def mark_drafter_confirmed(self) -> None:
        """The worker confirmed it built the plugin's drafter (``runner_choice``)."""
        with self._locked():
            self._set("drafter_confirmed", 1)

    def set_tracked_requests(self, tracked_requests: int) -> None:
        """The number of requests with policy state, between drafting steps."""
        with self._locked():
            self._set_own_total("tracked_requests", tracked_requests)

    def record_verification(
        self,
        num_relaxed_acceptances: int,
        generation_thresholds: list[float],
        verification_thresholds: list[float],
    ) -> None:
        """AdaSD: relaxed acceptances and the thresholds in force (one per request)."""
        finite = [t for t in generation_thresholds if t != float("inf")]
        with self._locked():
            self._add("num_relaxed_acceptances", num_relaxed_acceptances)
            self._add_scaled("generation_threshold_micro_sum", sum(finite))
            self._add_scaled("verification_threshold_micro_sum", sum(verification_thresholds))
            self._add("num_threshold_samples", len(verification_thresholds))

    def record_ngram_verification(self, num_draft_tokens: int,
                                  num_accepted_tokens: int) -> None:
        """The n-gram lookup's draft tokens verified in one step, and those
        accepted (drafter ``ngram+draft_model``)."""
        with self._locked():
            self._add("num_ngram_draft_tokens", num_draft_tokens)
            self._add("num_ngram_accepted_tokens", num_accepted_tokens)

    def snapshot(self) -> dict[str, object]:
        """Every field by name, and ``draft_length_counts``."""
        base = len(FIELDS)
        with self._locked(fcntl.LOCK_SH):
            values: dict[str, object] = {name: self._read(i) for i, name in enumerate(FIELDS)}
            values["draft_length_counts"] = [
                self._read(base + k) for k in range(self.max_num_draft_tokens + 1)
            ]
        return values

    def counts(self) -> dict[str, float]:
        """The counters as ``plugin_counts`` reads them from this engine's metrics."""
        values = self.snapshot()
        return {metric.count: float(metric.value(values)) for metric in METRICS
                if metric.kind == "counter"}

    def remove(self) -> None:
        try:
            self._map.close()
            self._file.close()
        finally:
            if self._owner and os.path.exists(self.path):
                os.unlink(self.path)
