"""The front end's Prometheus exporter of the plugin's metrics (``metrics.METRICS``).

``register_engine_counters`` puts a collector on this process's Prometheus
registry, which ``LLM.get_metrics()`` and ``/metrics`` read; at each scrape
the collector reads the engine's counter file (``metrics.StepCounters``) and
reports every metric of ``METRICS`` with vLLM's labels.
"""

from __future__ import annotations

import threading

from vllm_gammatune.telemetry.metrics import METRICS, StepCounters

#: the labels of every metric, as vLLM's own (``engine`` is vLLM's engine index)
ENGINE_LABELS = ("model_name", "engine")
#: ``vllm:gammatune_info``'s further labels, given the engine's method: the
#: plugin's runner and its drafter class, by drafter (``methods.drafters``)
INFO_LABELS = {"runner": "v1"}
DRAFTER_CLASSES = {"draft_model": "AdaptiveDraftModelProposer",
                   "ngram": "AdaptiveNgramProposer",
                   "ngram+draft_model": "AdaptiveDraftModelProposer"}


def _histogram_buckets(counts: list[int]) -> list[tuple[str, int]]:
    """Cumulative buckets ``le=0.0, 1.0, ..., +Inf`` of per-length counts."""
    cumulative, buckets = 0, []
    for k, count in enumerate(counts):
        cumulative += count
        buckets.append((str(float(k)), cumulative))
    buckets.append(("+Inf", cumulative))
    return buckets


class _PrometheusCollector:
    """Reads every live engine's counters at scrape time (front end only)."""

    def __init__(self):
        #: engine -> (counters, model_name, method, drafter)
        self._engines: dict[str, tuple[StepCounters, str, str, str]] = {}
        self._lock = threading.Lock()

    def add(self, engine: str, counters: StepCounters, model_name: str, method: str,
            drafter: str) -> None:
        with self._lock:
            self._engines[engine] = (counters, model_name, method, drafter)

    def clear(self) -> None:
        with self._lock:
            self._engines.clear()

    def collect(self):
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        family_of_kind = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily,
                          "histogram": HistogramMetricFamily}
        families = {metric.name: family_of_kind[metric.kind](
            metric.name, metric.help, labels=[*ENGINE_LABELS, *metric.labels])
            for metric in METRICS}
        with self._lock:
            engines = list(self._engines.items())
        for engine, (counters, model_name, method, drafter) in engines:
            try:
                values = counters.snapshot()
            except ValueError:  # closed
                continue
            extra_labels = {"method": method, "drafter": DRAFTER_CLASSES[drafter],
                            **INFO_LABELS}
            for metric in METRICS:
                labels = [model_name, engine, *(extra_labels[name] for name in metric.labels)]
                family = families[metric.name]
                if metric.kind == "histogram":
                    family.add_metric(labels, _histogram_buckets(values["draft_length_counts"]),
                                      float(values[metric.field]))
                    continue
                value = metric.value(values)
                if value is not None:
                    family.add_metric(labels, value)
        yield from families.values()


_collector: _PrometheusCollector | None = None


def register_engine_counters(counters: StepCounters, model_name: str, method: str,
                             drafter: str = "draft_model") -> None:
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
    _collector.add("0", counters, model_name, method, drafter)


def forget_engine_counters() -> None:
    """Stop reporting earlier engines (a new engine without the plugin starts)."""
    if _collector is not None:
        _collector.clear()
