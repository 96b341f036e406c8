"""The in-flight limit's gauges, read from the app's `Overload` when Prometheus scrapes
(the families themselves: service/observability/metrics/families.py, `OverloadMetrics`).
Nothing is done a request."""

from __future__ import annotations

import math

from service.observability.metrics.families import OverloadMetrics
from service.server.overload.inflight_limit import GradientLimit
from service.server.overload.state import Overload


def watch_overload(families: OverloadMetrics, overload: Overload) -> None:
    """Read the gauges from this Overload at every scrape."""
    limit = overload.limit
    families.limit.set_function(limit.current)
    families.inflight.set_function(lambda: overload.inflight)
    if isinstance(limit, GradientLimit):
        families.adaptive.set(1)
        families.latency.set_function(lambda: _seconds(limit.latency))
        families.baseline.set_function(lambda: _seconds(limit.baseline))
    else:
        families.adaptive.set(0)
        families.latency.set(math.nan)
        families.baseline.set(math.nan)


def _seconds(value: float | None) -> float:
    return math.nan if value is None else value
