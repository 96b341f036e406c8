"""Counting and observing without prometheus-client's per-call checks.

`count`, `shift` and `observe` skip prometheus-client's checks (a labelled child, a positive
amount for a counter or a histogram: both hold by construction in app_metrics.py), its walk
of the buckets and its lock, where `IN_PLACE` says they may. They read the children's fields
of prometheus-client 0.26 (pinned); tests/observability/test_metrics.py compares the
exposition with prometheus-client's own observe, so a version that moves them fails. What it
saves: docs/decisions/floods.md, "Refusals that cost almost nothing" (issue 23's cuts).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from prometheus_client import values

# Every request, refusals included, counts once and observes three or four histograms; a
# tools/call also observes its statement and its two Redis calls and moves the in-flight
# gauge twice. Whether a value can be added to in place is decided once, here, as
# prometheus-client decides its own value class once, when it is imported: a `MutexValue`
# (one process) unless its multiprocess mode is on (PROMETHEUS_MULTIPROC_DIR), and every
# metric's values are of that class. The values these functions update are written only from
# the event loop's thread (the one thread that answers requests), and a scrape reads a float,
# which the GIL never shows half-written: the lock has nothing to guard there. In
# multiprocess mode every update goes through prometheus-client's own methods.
IN_PLACE = values.ValueClass is values.MutexValue

if IN_PLACE:

    def count(child: Any, amount: int = 1) -> None:
        """`child.inc(amount)` of a Counter (a labelled child or an unlabelled one)."""
        child._value._value += amount

    def shift(gauge: Any, amount: float) -> None:
        """`gauge.inc(amount)` of an unlabelled Gauge (amount < 0: `dec`)."""
        gauge._value._value += amount

    def observe(child: Any, amount: float, exemplar: dict[str, str] | None = None) -> None:
        """`child.observe(amount, exemplar)` of a labelled Histogram child."""
        if exemplar is not None or amount != amount:  # an exemplar, or NaN: its own path
            child.observe(amount, exemplar)
            return
        child._sum._value += amount
        child._buckets[bisect_left(child._upper_bounds, amount)]._value += 1

else:

    def count(child: Any, amount: int = 1) -> None:
        child.inc(amount)

    def shift(gauge: Any, amount: float) -> None:
        gauge.inc(amount)

    def observe(child: Any, amount: float, exemplar: dict[str, str] | None = None) -> None:
        child.observe(amount, exemplar)
