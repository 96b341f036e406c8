"""Period windows and buckets in IANA zones: DST gaps at midnight, odd offsets, `all` units."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from service.rules.periods import (
    all_buckets,
    buckets_for,
    daily_buckets,
    first_instant,
    window_start,
)
from service.rules.shaping import format_local, resolve_zone

pytestmark = pytest.mark.unit


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


@pytest.mark.parametrize(
    ("zone", "day", "expected_utc", "expected_local"),
    [
        # ordinary midnights
        ("Europe/Berlin", date(2025, 1, 15), "2025-01-14T23:00:00Z", "2025-01-15T00:00:00+01:00"),
        ("Asia/Kathmandu", date(2025, 1, 1), "2024-12-31T18:15:00Z", "2025-01-01T00:00:00+05:45"),
        # Berlin changes at 02:00 / 03:00: midnight exists on both change days
        ("Europe/Berlin", date(2024, 3, 31), "2024-03-30T23:00:00Z", "2024-03-31T00:00:00+01:00"),
        ("Europe/Berlin", date(2024, 10, 27), "2024-10-26T22:00:00Z", "2024-10-27T00:00:00+02:00"),
        # Santiago and Havana skip midnight in spring: the day starts at 01:00
        ("America/Santiago", date(2024, 9, 8), "2024-09-08T04:00:00Z", "2024-09-08T01:00:00-03:00"),
        ("America/Havana", date(2024, 3, 10), "2024-03-10T05:00:00Z", "2024-03-10T01:00:00-04:00"),
        # Havana repeats midnight in autumn (01:00 → 00:00): the first midnight counts
        ("America/Havana", date(2024, 11, 3), "2024-11-03T04:00:00Z", "2024-11-03T00:00:00-04:00"),
    ],
)
def test_first_instant_of_a_local_date(
    zone: str, day: date, expected_utc: str, expected_local: str
) -> None:
    tz = ZoneInfo(zone)
    start = first_instant(day, tz)
    assert start == utc(expected_utc)
    assert format_local(start, tz) == expected_local
    # nothing earlier belongs to that date
    assert (start - timedelta(seconds=1)).astimezone(tz).date() < day


@pytest.mark.parametrize(
    ("period", "zone", "now", "expected"),
    [
        ("today", "Europe/Berlin", "2025-01-15T09:00:00Z", "2025-01-14T23:00:00Z"),
        # east of UTC near midnight: 00:30 local on the 16th is still the 15th in UTC
        ("today", "Pacific/Kiritimati", "2025-01-15T10:30:00Z", "2025-01-15T10:00:00Z"),
        ("today", "Asia/Tokyo", "2025-01-15T14:59:59Z", "2025-01-14T15:00:00Z"),
        ("today", "Asia/Tokyo", "2025-01-15T15:00:00Z", "2025-01-15T15:00:00Z"),
        ("today", "Asia/Kathmandu", "2025-01-15T18:14:00Z", "2025-01-14T18:15:00Z"),
        ("7d", "Europe/Berlin", "2024-04-02T10:00:00Z", "2024-03-26T23:00:00Z"),
        ("30d", "America/Santiago", "2024-09-20T12:00:00Z", "2024-08-22T04:00:00Z"),
        ("7d", "America/Santiago", "2024-09-14T12:00:00Z", "2024-09-08T04:00:00Z"),
    ],
)
def test_window_start(period: str, zone: str, now: str, expected: str) -> None:
    assert window_start(period, utc(now), ZoneInfo(zone)) == utc(expected)


def test_all_has_no_window() -> None:
    assert window_start("all", utc("2025-01-15T09:00:00Z"), ZoneInfo("UTC")) is None


def test_seven_daily_buckets_across_berlin_spring_change() -> None:
    tz = ZoneInfo("Europe/Berlin")
    plan = daily_buckets("7d", utc("2024-04-02T10:00:00Z"), tz)
    assert [format_local(b, tz) for b in plan.starts] == [
        "2024-03-27T00:00:00+01:00",
        "2024-03-28T00:00:00+01:00",
        "2024-03-29T00:00:00+01:00",
        "2024-03-30T00:00:00+01:00",
        "2024-03-31T00:00:00+01:00",
        "2024-04-01T00:00:00+02:00",
        "2024-04-02T00:00:00+02:00",
    ]
    # the change day is 23 hours long
    assert plan.starts[5] - plan.starts[4] == timedelta(hours=23)


def test_thirty_daily_buckets_across_berlin_autumn_change() -> None:
    tz = ZoneInfo("Europe/Berlin")
    plan = daily_buckets("30d", utc("2024-11-10T10:00:00Z"), tz)
    assert len(plan.starts) == 30
    lengths = {b - a for a, b in zip(plan.starts, plan.starts[1:], strict=False)}
    assert lengths == {timedelta(hours=24), timedelta(hours=25)}
    assert format_local(plan.starts[0], tz) == "2024-10-12T00:00:00+02:00"
    assert format_local(plan.starts[-1], tz) == "2024-11-10T00:00:00+01:00"


def test_santiago_bucket_of_the_skipped_midnight_starts_at_one() -> None:
    tz = ZoneInfo("America/Santiago")
    plan = daily_buckets("7d", utc("2024-09-10T12:00:00Z"), tz)
    shown = [format_local(b, tz) for b in plan.starts]
    assert "2024-09-08T01:00:00-03:00" in shown
    assert shown[0] == "2024-09-04T00:00:00-04:00"


@pytest.mark.parametrize(
    ("first", "now", "unit", "count", "first_at"),
    [
        ("2025-01-10T12:00:00Z", "2025-01-15T09:00:00Z", "day", 6, "2025-01-10T00:00:00+01:00"),
        # exactly 30 local dates still fit in days
        ("2024-12-17T12:00:00Z", "2025-01-15T09:00:00Z", "day", 30, "2024-12-17T00:00:00+01:00"),
        # 31 dates: ISO weeks, starting on the Monday
        ("2024-12-16T12:00:00Z", "2025-01-15T09:00:00Z", "week", 5, "2024-12-16T00:00:00+01:00"),
        ("2024-11-20T12:00:00Z", "2025-01-15T09:00:00Z", "week", 9, "2024-11-18T00:00:00+01:00"),
        ("2023-03-20T12:00:00Z", "2025-01-15T09:00:00Z", "month", 23, "2023-03-01T00:00:00+01:00"),
        (
            "2020-05-20T12:00:00Z",
            "2025-01-15T09:00:00Z",
            "quarter",
            20,
            "2020-04-01T00:00:00+02:00",
        ),
        ("2001-05-20T12:00:00Z", "2025-01-15T09:00:00Z", "year", 25, "2001-01-01T00:00:00+01:00"),
        # beyond 30 years: the newest 30 years
        ("1980-05-20T12:00:00Z", "2025-01-15T09:00:00Z", "year", 30, "1996-01-01T00:00:00+01:00"),
    ],
)
def test_all_buckets_pick_the_smallest_unit(
    first: str, now: str, unit: str, count: int, first_at: str
) -> None:
    tz = ZoneInfo("Europe/Berlin")
    plan = all_buckets(utc(first), utc(now), tz)
    assert plan.unit == unit
    assert len(plan.starts) == count
    assert format_local(plan.starts[0], tz) == first_at
    assert plan.starts[-1] <= utc(now)
    assert plan.starts == sorted(plan.starts)


def test_all_buckets_empty_without_dated_rows_or_only_future_ones() -> None:
    tz = ZoneInfo("UTC")
    now = utc("2025-01-15T09:00:00Z")
    assert all_buckets(None, now, tz).starts == []
    assert all_buckets(now + timedelta(seconds=1), now, tz).starts == []
    assert buckets_for("all", now, tz, now).starts == [utc("2025-01-15T00:00:00Z")]


def test_weeks_start_on_monday_in_kathmandu() -> None:
    tz = ZoneInfo("Asia/Kathmandu")
    plan = all_buckets(utc("2024-11-01T00:00:00Z"), utc("2025-01-15T09:00:00Z"), tz)
    assert plan.unit == "week"
    for start in plan.starts:
        local = start.astimezone(tz)
        assert local.weekday() == 0
        assert (local.hour, local.minute) == (0, 0)
        assert format_local(start, tz).endswith("+05:45")


@pytest.mark.parametrize("name", ["Mars/Olympus", "europe/berlin", "", " UTC", "../etc/passwd"])
def test_unknown_zone_is_a_validation_error(name: str) -> None:
    from service.errors import ValidationError

    with pytest.raises(ValidationError):
        resolve_zone(name)
