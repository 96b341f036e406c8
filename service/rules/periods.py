"""Period windows and statistics buckets in IANA zones (docs/reading-rules.md): pure functions.

Every boundary is an aware UTC instant computed with zoneinfo (tzdata), never with the
database's zone tables. "First instant of a local date" is local midnight, or, when a DST
change skips midnight, the first instant that exists on that date (the transition itself).
A bucket runs from its `at` to the next bucket's `at`; the last one ends at `asOf`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

PERIOD_DAYS = {"today": 1, "7d": 7, "30d": 30}
MAX_BUCKETS = 30
UNITS = ("day", "week", "month", "quarter", "year")


def first_instant(day: date, zone: ZoneInfo) -> datetime:
    """The first instant (UTC) whose local date in `zone` is `day`."""
    midnight = datetime.combine(day, time(0))
    # fold=0 picks the earlier of two midnights when midnight repeats (a fall-back at 01:00).
    candidate = midnight.replace(tzinfo=zone).astimezone(UTC)
    if candidate.astimezone(zone).replace(tzinfo=None) == midnight:
        return candidate
    # Midnight falls in a gap. The transition lies between midnight read with the offset
    # after it (fold=1) and with the offset before it (fold=0); local time only moves
    # forward inside that span, so the first local instant on `day` is found by bisection
    # over whole seconds (transitions happen on whole seconds).
    low = midnight.replace(tzinfo=zone, fold=1).astimezone(UTC)
    high = candidate
    if low > high:
        low, high = high, low
    lo_s, hi_s = int(low.timestamp()), int(high.timestamp())
    while lo_s < hi_s:
        mid = (lo_s + hi_s) // 2
        if datetime.fromtimestamp(mid, UTC).astimezone(zone).date() >= day:
            hi_s = mid
        else:
            lo_s = mid + 1
    return datetime.fromtimestamp(hi_s, UTC)


def local_date(instant: datetime, zone: ZoneInfo) -> date:
    return instant.astimezone(zone).date()


def window_start(period: str, now: datetime, zone: ZoneInfo) -> datetime | None:
    """Start of the period window ending at `now`; None for `all` (no bounds)."""
    days = PERIOD_DAYS.get(period)
    if days is None:
        return None
    today = local_date(now, zone)
    return first_instant(today - timedelta(days=days - 1), zone)


@dataclass(frozen=True)
class Buckets:
    """Bucket starts (UTC, ascending); a row at t belongs to the last start ≤ t, if t ≤ asOf."""

    unit: str
    starts: list[datetime]


def daily_buckets(period: str, now: datetime, zone: ZoneInfo) -> Buckets:
    """One bucket per local date of a today/7d/30d window, zero-count days included."""
    days = PERIOD_DAYS[period]
    today = local_date(now, zone)
    dates = [today - timedelta(days=offset) for offset in range(days - 1, -1, -1)]
    return Buckets("day", [first_instant(d, zone) for d in dates])


def _unit_start(day: date, unit: str) -> date:
    if unit == "day":
        return day
    if unit == "week":
        return day - timedelta(days=day.weekday())  # ISO weeks start on Monday
    if unit == "month":
        return day.replace(day=1)
    if unit == "quarter":
        return date(day.year, 3 * ((day.month - 1) // 3) + 1, 1)
    return date(day.year, 1, 1)


def _next_unit(day: date, unit: str) -> date:
    """The start of the unit after the one starting at `day` (a unit start)."""
    if unit == "day":
        return day + timedelta(days=1)
    if unit == "week":
        return day + timedelta(days=7)
    months = {"month": 1, "quarter": 3, "year": 12}[unit]
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _unit_count(first: date, last: date, unit: str) -> int:
    """How many units of `unit` cover the local dates first..last (both included)."""
    a, b = _unit_start(first, unit), _unit_start(last, unit)
    if unit == "day":
        return (b - a).days + 1
    if unit == "week":
        return (b - a).days // 7 + 1
    months = (b.year - a.year) * 12 + (b.month - a.month)
    return months // {"month": 1, "quarter": 3, "year": 12}[unit] + 1


def all_buckets(first_dated: datetime | None, now: datetime, zone: ZoneInfo) -> Buckets:
    """`all` buckets: the smallest unit covering the first dated execution through asOf in at
    most 30 buckets. None when nothing is dated at or before asOf.

    Beyond 30 years even yearly buckets cannot cover the span: the newest 30 years are
    returned and older rows stay in the totals only (docs/decisions/executions.md).
    """
    if first_dated is None or first_dated > now:
        return Buckets("day", [])
    first, last = local_date(first_dated, zone), local_date(now, zone)
    unit = next((u for u in UNITS if _unit_count(first, last, u) <= MAX_BUCKETS), "year")
    starts: list[date] = []
    current = _unit_start(first, unit)
    while current <= last:
        starts.append(current)
        current = _next_unit(current, unit)
    starts = starts[-MAX_BUCKETS:]
    return Buckets(unit, [first_instant(d, zone) for d in starts])


def buckets_for(
    period: str, now: datetime, zone: ZoneInfo, first_dated: datetime | None
) -> Buckets:
    if period == "all":
        return all_buckets(first_dated, now, zone)
    return daily_buckets(period, now, zone)
