"""Counting and observing without prometheus-client's per-call checks.

Every request, refusals included, counts once and observes three or four histograms; a
tools/call also observes its statement and its two Redis calls and moves the in-flight
gauge twice. These functions skip prometheus-client's checks (a labelled child, a positive
amount for a counter or a histogram: both hold by construction in service/metrics.py), its
walk of the buckets and its lock. They read the children's fields of prometheus-client 0.26
(pinned); tests/ops/test_metrics.py compares the exposition with prometheus-client's own
observe, so a version that moves them fails.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from prometheus_client.values import MutexValue


def count(child: Any) -> None:
    """`child.inc()` of a labelled Counter child."""
    _add(child._value, 1)


def shift(gauge: Any, amount: float) -> None:
    """`gauge.inc(amount)` of an unlabelled Gauge (amount < 0: `dec`)."""
    _add(gauge._value, amount)


def observe(child: Any, amount: float, exemplar: dict[str, str] | None = None) -> None:
    """`child.observe(amount, exemplar)` of a labelled Histogram child."""
    if exemplar is not None or amount != amount:  # an exemplar, or NaN: prometheus-client's
        child.observe(amount, exemplar)
        return
    _add(child._sum, amount)
    _add(child._buckets[bisect_left(child._upper_bounds, amount)], 1)


def _add(value: Any, amount: float) -> None:
    """`value.inc(amount)`, of a MutexValue without taking its lock: the values these two
    update are written only from the event loop's thread (the one thread that answers
    requests), and a scrape reads a float, which the GIL never shows half-written. Any
    other kind of value (prometheus-client's multiprocess mode) is incremented as usual."""
    if value.__class__ is MutexValue:
        value._value += amount
    else:
        value.inc(amount)
