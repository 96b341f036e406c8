"""Failed sign-in throttle, shared by every replica (kept in PostgreSQL).

Three holds, each a wait before the next attempt is even considered (`hold`): the (account,
address) pair, whose delay doubles after `free_failures`; the account as a whole, only for
failures from `account_addresses` distinct addresses and not from an address it signed in
from within `KNOWN_ADDRESS_DAYS`; the address across accounts. `record_failure` also deletes
forgotten pairs and ended address windows a few at a time. Keys are SHA-256 digests of what
was typed, so unknown accounts are held exactly like known ones. Why, and the defaults:
docs/decisions/oauth.md, "The failed sign-in throttle (issue 21)"; the sweep of windows:
docs/decisions/cleanup.md.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import timedelta

import asyncpg

from service.edge.client_address import address_block
from service.settings.oauth import SigninThrottle

KNOWN_ADDRESS_DAYS = 30
# A pair's failures are forgotten this long after its last one.
PAIR_MEMORY = timedelta(days=1)
_KNOWN_FOR = timedelta(days=KNOWN_ADDRESS_DAYS)
_FORGET_BATCH = 20


def account_key(email: str) -> bytes:
    return hashlib.sha256(b"account:" + email.strip().lower().encode("utf-8")).digest()


def address_key(address: str) -> bytes:
    """The address's key: of its block (an IPv6 address's /64, issue 42), like every
    per-address decision."""
    return hashlib.sha256(b"address:" + address_block(address).encode("utf-8")).digest()


@dataclass(frozen=True)
class Hold:
    """Whole seconds until a sign-in may be tried, and which hold says so."""

    seconds: int
    reason: str  # "pair", "account" or "address"


_WAIT = """
    SELECT
      (SELECT extract(epoch FROM last_failure_at - now())
              + least($6::float8 * power(2, least(failures - $5 - 1, 40)), $7::float8)
         FROM signin_pairs
        WHERE account_key = $1 AND address_key = $2 AND failures > $5
          AND last_failure_at > now() - $9::interval) AS pair,
      (SELECT extract(epoch FROM last_failure_at + $3::interval - now())
         FROM signin_pairs
        WHERE account_key = $1 AND failures > 0 AND last_failure_at > now() - $3::interval
          AND NOT EXISTS (
              SELECT 1 FROM signin_pairs
               WHERE account_key = $1 AND address_key = $2
                 AND last_success_at > now() - $10::interval)
        ORDER BY last_failure_at DESC OFFSET $8 - 1 LIMIT 1) AS account,
      (SELECT extract(epoch FROM window_start + $3::interval - now())
         FROM signin_throttle
        WHERE throttle_key = $2 AND window_start > now() - $3::interval
          AND failures >= $4) AS address
"""

_FAIL = """
    WITH pair AS (
        INSERT INTO signin_pairs AS p (account_key, address_key, failures, last_failure_at)
        VALUES ($1, $2, 1, now())
        ON CONFLICT (account_key, address_key) DO UPDATE SET
            failures = CASE WHEN p.last_failure_at IS NULL
                              OR p.last_failure_at <= now() - $4::interval THEN 1
                            ELSE p.failures + 1 END,
            last_failure_at = now()
    ), address AS (
        INSERT INTO signin_throttle AS t (throttle_key, failures, window_start)
        VALUES ($2, 1, now())
        ON CONFLICT (throttle_key) DO UPDATE SET
            failures = CASE WHEN t.window_start <= now() - $3::interval THEN 1
                            ELSE t.failures + 1 END,
            window_start = CASE WHEN t.window_start <= now() - $3::interval THEN now()
                                ELSE t.window_start END
    ), expired AS (
        DELETE FROM signin_throttle
         WHERE ctid = ANY(ARRAY(
               SELECT ctid FROM signin_throttle
                WHERE window_start < now() - $3::interval - $4::interval
                  AND throttle_key <> $2
                LIMIT $6))
    ), forgotten AS (
        DELETE FROM signin_pairs
         WHERE ctid = ANY(ARRAY(
               SELECT ctid FROM signin_pairs
                WHERE greatest(last_failure_at, last_success_at) < now() - $5::interval
                  AND NOT (account_key = $1 AND address_key = $2)
                LIMIT $6))
    )
    SELECT 1
"""

# A success clears the pair and marks the address known. The previous release's account
# key in signin_throttle is cleared too, so its replicas do not hold the owner while both
# releases serve.
_SUCCEED = """
    WITH pair AS (
        INSERT INTO signin_pairs AS p (account_key, address_key, failures, last_success_at)
        VALUES ($1, $2, 0, now())
        ON CONFLICT (account_key, address_key) DO UPDATE SET
            failures = 0, last_failure_at = NULL, last_success_at = now()
    ), previous AS (
        DELETE FROM signin_throttle WHERE throttle_key = $1
    )
    SELECT 1
"""


async def hold(pool: asyncpg.Pool, settings: SigninThrottle, email: str, address: str) -> Hold:
    """Whether a sign-in of `email` from `address` must wait, and how long (0: try now)."""
    row = await pool.fetchrow(
        _WAIT,
        account_key(email),
        address_key(address),
        timedelta(seconds=settings.window_seconds),
        settings.address_failures,
        settings.free_failures,
        settings.first_delay_seconds,
        settings.longest_delay_seconds,
        settings.account_addresses,
        PAIR_MEMORY,
        _KNOWN_FOR,
    )
    waits = [(float(row[r]), r) for r in ("pair", "account", "address") if row[r] is not None]
    longest = max(waits, default=(0.0, "pair"))
    if longest[0] <= 0:
        return Hold(0, longest[1])
    return Hold(max(1, math.ceil(longest[0])), longest[1])


async def record_failure(
    pool: asyncpg.Pool, settings: SigninThrottle, email: str, address: str
) -> None:
    await pool.execute(
        _FAIL,
        account_key(email),
        address_key(address),
        timedelta(seconds=settings.window_seconds),
        PAIR_MEMORY,
        _KNOWN_FOR,
        _FORGET_BATCH,
    )


async def record_success(pool: asyncpg.Pool, email: str, address: str) -> None:
    await pool.execute(_SUCCEED, account_key(email), address_key(address))
