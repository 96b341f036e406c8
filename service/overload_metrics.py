"""The metrics of the in-flight limit of load shedding: the limit, what it is computed from
(the latency of admitted requests, the baseline) and its decisions. The shed requests
themselves stay counted by `shed_requests_total{reason}` (service/metrics.py).

The gauges are read from the app's `Overload` when Prometheus scrapes (nothing a request);
a request admitted on a shed route costs one counter increment.
"""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Gauge

from service.inflight_limit import GradientLimit
from service.metric_labels import PREFIX
from service.overload import Overload


class OverloadMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"{PREFIX}_{name}", doc, registry=registry)

        self.limit = gauge(
            "inflight_limit",
            "Requests this replica lets in flight on /mcp and the OAuth endpoints before it "
            "sheds (adaptive, or the fixed cap).",
        )
        self.inflight = gauge(
            "inflight_limit_requests",
            "Requests in flight on /mcp and the OAuth endpoints: what the in-flight limit counts.",
        )
        self.latency = gauge(
            "inflight_limit_latency_seconds",
            "90th percentile latency of the admitted requests of the adaptive limit's last "
            "window (NaN until measured, and under the fixed cap).",
        )
        self.baseline = gauge(
            "inflight_limit_baseline_seconds",
            "The adaptive limit's baseline: the 90th percentile latency at low concurrency "
            "(NaN until measured, and under the fixed cap).",
        )
        self.adaptive = gauge("inflight_limit_adaptive", "1 when the in-flight limit adapts.")
        self.admitted = Counter(
            f"{PREFIX}_admitted_requests_total",
            "Requests on /mcp and the OAuth endpoints that load shedding let in.",
            registry=registry,
        )

    def watch(self, overload: Overload) -> None:
        """Read the gauges from this Overload at every scrape."""
        limit = overload.limit
        self.limit.set_function(limit.current)
        self.inflight.set_function(lambda: overload.inflight)
        if isinstance(limit, GradientLimit):
            self.adaptive.set(1)
            self.latency.set_function(lambda: _seconds(limit.latency))
            self.baseline.set_function(lambda: _seconds(limit.baseline))
        else:
            self.adaptive.set(0)
            self.latency.set(math.nan)
            self.baseline.set(math.nan)


def _seconds(value: float | None) -> float:
    return math.nan if value is None else value
