"""Value shaping shared by the loader and the tools: sanitising, shortening, instants, amounts,
zones.

The loader sanitises (so stored, sorted and returned values agree), shortens node inventory
strings, checks amounts' digits and workspace zones; the tools shorten on read, format
instants and exact decimal amounts, and resolve the zone a call names.
"""

from __future__ import annotations

import re
import zoneinfo
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from service.errors import ValidationError

# Zones are the names the tzdata package knows (docs/reading-rules.md), not the host's zone files:
# every replica and every test machine computes the same windows.
zoneinfo.reset_tzpath(to=())

REPLACEMENT = "\ufffd"
# Strings whose schema pattern is ^[^\u0000-\u001f\u007f-\u009f]+$ (names, ids, labels).
_C0_C1 = re.compile("[\x00-\x1f\x7f-\x9f]")
# History strings whose pattern is ^[^\u0000-\u001f\u007f]+$ (ids inside a history report).
_C0_DEL = re.compile("[\x00-\x1f\x7f]")


def sanitize_name(text: str) -> str:
    """For strings whose pattern excludes C0, DEL and C1: each becomes U+FFFD."""
    return _C0_C1.sub(REPLACEMENT, text)


def sanitize_history_id(text: str) -> str:
    """For history strings whose pattern excludes C0 and DEL only."""
    return _C0_DEL.sub(REPLACEMENT, text)


def sanitize_free_text(text: str) -> str:
    """For strings without a pattern (error messages, node names in a history): only NUL."""
    return text.replace("\x00", REPLACEMENT)


def shorten(text: str, limit: int) -> tuple[str, bool]:
    """Shorten to `limit` code points; return (text, whether it was shortened)."""
    if len(text) <= limit:
        return text, False
    return text[:limit], True


def format_instant(value: datetime) -> str:
    """A stored instant as RFC 3339 in UTC: 2025-01-15T09:00:01.500Z (ms, or µs when needed)."""
    value = value.astimezone(UTC)
    # isoformat, not strftime: %Y does not zero-pad years before 1000 (RFC 3339 needs 4 digits)
    base = value.replace(tzinfo=None, microsecond=0).isoformat()
    micro = value.microsecond
    if micro == 0:
        return base + "Z"
    if micro % 1000 == 0:
        return f"{base}.{micro // 1000:03d}Z"
    return f"{base}.{micro:06d}Z"


def format_optional_instant(value: datetime | None) -> str | None:
    """format_instant, or None for a missing instant."""
    return None if value is None else format_instant(value)


def format_local(value: datetime, zone: ZoneInfo) -> str:
    """An instant with the zone's UTC offset at that instant: 2025-01-15T10:00:00+01:00.

    RFC 3339 offsets have whole minutes. Local mean time offsets of old dates carry seconds
    (e.g. +00:19:32): such an instant is written in UTC ("Z") rather than misstated.
    """
    local = value.astimezone(zone)
    offset = local.utcoffset() or timedelta(0)
    if offset.total_seconds() % 60:
        return format_instant(value)
    total = int(offset.total_seconds()) // 60
    sign = "+" if total >= 0 else "-"
    hours, minutes = divmod(abs(total), 60)
    base = local.replace(tzinfo=None, microsecond=0).isoformat()
    micro = local.microsecond
    frac = "" if micro == 0 else (f".{micro // 1000:03d}" if micro % 1000 == 0 else f".{micro:06d}")
    return f"{base}{frac}{sign}{hours:02d}:{minutes:02d}"


def format_amount(amount: Decimal) -> str:
    """Plain notation, no exponent, no trailing fractional zeros: 1.500 → 1.5, 0.000 → 0."""
    if amount == 0:
        return "0"
    text = format(amount, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


MAX_INTEGER_DIGITS = 38
MAX_FRACTION_DIGITS = 18


def amount_fits(amount: Decimal) -> bool:
    """Whether an amount is representable by the schema: ≤38 integer, ≤18 fractional digits."""
    text = format_amount(amount)
    whole, _, frac = text.partition(".")
    return len(whole) <= MAX_INTEGER_DIGITS and len(frac) <= MAX_FRACTION_DIGITS


def duration_ms(started: datetime | None, stopped: datetime | None) -> int | None:
    """stoppedAt − startedAt in whole ms, rounded down; null if either is missing or negative."""
    if started is None or stopped is None:
        return None
    delta = stopped - started
    if delta < timedelta(0):
        return None
    return (delta.days * 86_400_000) + (delta.seconds * 1000) + (delta.microseconds // 1000)


def resolve_zone(name: str) -> ZoneInfo:
    """An IANA zone known to tzdata (case-sensitive), else VALIDATION_ERROR — never UTC."""
    if not name or name != name.strip() or ".." in name or name.startswith("/") or "\\" in name:
        raise _bad_zone(name)
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as err:
        raise _bad_zone(name) from err
    if zone.key != name:
        raise _bad_zone(name)
    return zone


def _bad_zone(name: str) -> ValidationError:
    shown = name if len(name) <= 100 else name[:100] + "…"
    return ValidationError(
        f"`timeZone` {shown!r} is not an IANA time zone name.",
        hint="Use a case-sensitive IANA name such as Europe/Berlin or Asia/Kathmandu.",
    )
