"""Deterministic ids, per-record random streams and local-time arithmetic for the demo.

Ids are hashes of the seed and a record's stable key, never draws from a shared stream:
loading the demo again at a later `now` upserts the same records (the set never changes
with the clock), so re-running `make run` refreshes times instead of piling up rows.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from service.rules.shaping import format_instant

Json = dict[str, Any]
_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def stable_uuid(seed: int, *key: object) -> str:
    """A version-4-shaped UUID that depends only on the seed and the key."""
    digest = hashlib.sha256(":".join(map(str, (seed, *key))).encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def stable_rng(seed: int, *key: object) -> random.Random:
    """A random stream of its own for one record family (str seeds hash with SHA-512)."""
    return random.Random(":".join(map(str, (seed, *key))))


def n8n_workflow_id(seed: int, *key: object) -> str:
    """A 16-character id shaped like n8n's workflow ids (e.g. aBcD1234EfGh5678)."""
    digest = hashlib.sha256(":".join(map(str, ("wf", seed, *key))).encode()).digest()
    return "".join(_ALNUM[b % len(_ALNUM)] for b in digest[:16])


def iso(value: datetime) -> str:
    return format_instant(value)


def truncate_ms(value: datetime) -> datetime:
    value = value.astimezone(UTC)
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def local_instant(day: date, seconds: float, zone: ZoneInfo) -> datetime:
    """The instant `seconds` of wall-clock time after local midnight of `day`, in UTC.

    Wall-clock arithmetic: on a DST day a time inside the gap maps forward (fold=0), like
    a cron schedule that fires once.
    """
    wall = datetime.combine(day, time()) + timedelta(seconds=seconds)
    return wall.replace(tzinfo=zone).astimezone(UTC)


def local_today(now: datetime, zone: ZoneInfo) -> date:
    return now.astimezone(zone).date()
