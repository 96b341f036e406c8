"""The request and rate limits, load shedding and the main listener's guards against slow
clients: the settings that bound what one request, one client and one replica may take."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from service.errors import ConfigError
from service.settings.variables import (
    Setting,
    flag,
    millis,
    non_negative_int,
    parse,
    positive_float,
    positive_int,
    read_section,
    setting,
)

ADAPTIVE = "adaptive"
FIXED = "fixed"

# The PostgreSQL pool's bounds (Config.db_pool_min / db_pool_max), read here because the
# in-flight limit's default is twice the maximum.
POOL_MIN = Setting("ELOVA_DB_POOL_MIN", positive_int, 2)
POOL_MAX = Setting("ELOVA_DB_POOL_MAX", positive_int, 10)


def _admission(raw: str) -> str:
    if raw not in (ADAPTIVE, FIXED):
        raise ValueError(f"expected {ADAPTIVE} or {FIXED}, got {raw!r}")
    return raw


def _wait_seconds(raw: str) -> float:
    value = int(raw)
    if not 0 <= value <= 30_000:
        raise ValueError(f"expected milliseconds from 0 (no wait) to 30000, got {raw!r}")
    return value / 1000


def _lag_seconds(raw: str) -> float:
    value = int(raw)
    if not 0 <= value <= 10_000:
        raise ValueError(f"expected milliseconds from 0 (off) to 10000, got {raw!r}")
    return value / 1000


def _grace(raw: str) -> float:
    value = float(raw)
    if not 0 <= value <= 5:
        raise ValueError("the lease grace is at most 5 seconds (docs/limits.md)")
    return value


@dataclass(frozen=True)
class Limits:
    """Request and rate limits (docs/limits.md); defaults are the specification's.

    `global_concurrency` is per replica (no Redis call): a fleet of N replicas admits N times
    it. `fleet_concurrency` (None: off) bounds the whole fleet through leased blocks
    (service/limits/fleet.py). A request over a concurrency cap waits up to
    `slot_wait_seconds` (0: never) for a slot, in arrival order, while at most
    `waiters` requests of this replica and `waiters_per_account` of one account wait."""

    global_concurrency: int = setting("ELOVA_LIMIT_GLOBAL_CONCURRENCY", positive_int, 4)
    account_concurrency: int = setting("ELOVA_LIMIT_ACCOUNT_CONCURRENCY", positive_int, 2)
    approval_per_minute: int = setting("ELOVA_LIMIT_APPROVAL_PER_MINUTE", positive_int, 60)
    account_per_day: int | None = setting("ELOVA_LIMIT_ACCOUNT_PER_DAY", positive_int, None)
    request_deadline_seconds: float = setting(
        "ELOVA_REQUEST_DEADLINE_SECONDS", positive_float, 30.0
    )
    max_body_bytes: int = setting("ELOVA_MAX_BODY_BYTES", positive_int, 32 * 1024)
    max_response_bytes: int = setting("ELOVA_MAX_RESPONSE_BYTES", positive_int, 256 * 1024)
    lease_grace_seconds: float = setting("ELOVA_LEASE_GRACE_SECONDS", _grace, 5.0)
    expected_replicas: int = setting("ELOVA_EXPECTED_REPLICAS", positive_int, 1)
    # Redis is asked on every request: a call either answers within this timeout or fails,
    # and after `breaker_failures` failures in a row the per-process limiter takes over for
    # `breaker_cooldown_seconds` before Redis is tried again.
    redis_timeout_seconds: float = setting("ELOVA_REDIS_TIMEOUT_MS", millis, 0.25)
    breaker_failures: int = setting("ELOVA_REDIS_BREAKER_FAILURES", positive_int, 3)
    breaker_cooldown_seconds: float = setting(
        "ELOVA_REDIS_BREAKER_COOLDOWN_SECONDS", positive_float, 1.0
    )
    # Opt-in: the admission's Redis call overlaps the request's work, and a refusal still
    # replaces the answer; the concurrency caps then bound answers, not statements
    # (docs/decisions/limits.md, Overlapped admission). False: admitted before any work.
    admission_overlap: bool = setting("ELOVA_ADMISSION_OVERLAP", flag, False)
    fleet_concurrency: int | None = setting("ELOVA_LIMIT_FLEET_CONCURRENCY", positive_int, None)
    slot_wait_seconds: float = setting("ELOVA_LIMIT_SLOT_WAIT_MS", _wait_seconds, 2.0)
    waiters: int = setting("ELOVA_LIMIT_WAITERS", non_negative_int, 256)
    waiters_per_account: int = setting("ELOVA_LIMIT_WAITERS_PER_ACCOUNT", non_negative_int, 8)


@dataclass(frozen=True)
class Shedding:
    """When this replica refuses new requests at once (503 + Retry-After,
    service/server/overload/shedding.py): event-loop lag at `loop_lag_seconds` (0: never for
    lag), or the requests in flight on the shed routes at the in-flight limit. `admission`
    chooses that limit: fixed (`max_inflight` itself, the default) or adaptive (sized from
    the measured latency, at most `max_inflight`; opt-in, docs/decisions/floods.md); by
    default `max_inflight` is twice the PostgreSQL pool."""

    loop_lag_seconds: float = setting("ELOVA_SHED_LOOP_LAG_MS", _lag_seconds, 0.05)
    max_inflight: int = 20  # read_shedding: ELOVA_SHED_MAX_INFLIGHT, unset 2 x the pool
    admission: str = setting("ELOVA_SHED_ADMISSION", _admission, FIXED)


@dataclass(frozen=True)
class Connections:
    """The main listener's guards against slow and idle clients (service/server/connections.py)."""

    max_connections: int = setting("ELOVA_MAX_CONNECTIONS", positive_int, 1000)
    # One address's share at the cap (IPv6 per /64; 0: none): at the cap an address holding
    # more gives way to one holding fewer, and one holding this many cannot take another's.
    max_connections_per_address: int = setting(
        "ELOVA_MAX_CONNECTIONS_PER_ADDRESS", non_negative_int, 100
    )
    # first byte of a request head → the whole head
    header_timeout_seconds: float = setting("ELOVA_HEADER_TIMEOUT_SECONDS", positive_float, 10.0)
    # the whole head → the whole body
    body_timeout_seconds: float = setting("ELOVA_BODY_TIMEOUT_SECONDS", positive_float, 10.0)
    # An idle keep-alive connection is closed after this long; longer than the idle timeout
    # of the load balancer in front, so the balancer, not the service, ends idle connections.
    keepalive_timeout_seconds: float = setting(
        "ELOVA_KEEPALIVE_TIMEOUT_SECONDS", positive_float, 75.0
    )
    # Refusal pacing: past this many refusals in a row on one connection (0: never), each
    # further refusal's answer waits, from 10 ms doubling up to the longest pause.
    pace_refusals_after: int = setting("ELOVA_PACE_REFUSALS_AFTER", non_negative_int, 10)
    longest_refusal_pause_seconds: float = setting("ELOVA_LONGEST_REFUSAL_PAUSE_MS", millis, 1.0)


def read_pool_max(env: Mapping[str, str]) -> int:
    """ELOVA_DB_POOL_MAX, refused when below ELOVA_DB_POOL_MIN."""
    low, high = POOL_MIN.read(env), POOL_MAX.read(env)
    if low > high:
        raise ConfigError(
            f"ELOVA_DB_POOL_MIN ({low}) is larger than ELOVA_DB_POOL_MAX ({high}); "
            "lower the minimum or raise the maximum"
        )
    return high


def read_shedding(env: Mapping[str, str]) -> Shedding:
    """ELOVA_SHED_LOOP_LAG_MS (0: off), ELOVA_SHED_ADMISSION (adaptive | fixed) and
    ELOVA_SHED_MAX_INFLIGHT (unset: 2 x the pool)."""
    inflight = parse(env, "ELOVA_SHED_MAX_INFLIGHT", positive_int, 2 * read_pool_max(env))
    return read_section(Shedding, env, max_inflight=inflight)
