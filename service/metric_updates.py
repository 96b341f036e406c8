"""Counting and observing without prometheus-client's per-call checks.

Every request, refusals included, counts once and observes three or four histograms. These
two functions skip prometheus-client's checks (a labelled child, a positive amount: both
hold by construction in service/metrics.py) and its walk of the buckets. They read the
children's fields of prometheus-client 0.26 (pinned); tests/ops/test_metrics.py compares
the exposition with prometheus-client's own observe, so a version that moves them fails.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any


def count(child: Any) -> None:
    """`child.inc()` of a labelled Counter child."""
    child._value.inc(1)


def observe(child: Any, amount: float, exemplar: dict[str, str] | None = None) -> None:
    """`child.observe(amount, exemplar)` of a labelled Histogram child."""
    if exemplar is not None or amount != amount:  # an exemplar, or NaN: prometheus-client's
        child.observe(amount, exemplar)
        return
    child._sum.inc(amount)
    child._buckets[bisect_left(child._upper_bounds, amount)].inc(1)
