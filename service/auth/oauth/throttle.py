"""Failed sign-in throttle, per account and per client address, shared by every replica.

Each key counts failures in a fixed 15-minute window that starts at its first failure. An
account key refuses sign-in after 5 failures (a success clears it); an address key after 30
(offices share addresses, so it is looser and a success does not clear it). Keys are
SHA-256 digests, so the table holds no email addresses. While a key is over its limit the
password is not even checked, so a throttled guess costs the attacker a round trip and us no
scrypt work.
"""

from __future__ import annotations

import hashlib
import math
from datetime import timedelta

import asyncpg

WINDOW = timedelta(minutes=15)
ACCOUNT_LIMIT = 5
ADDRESS_LIMIT = 30


def account_key(email: str) -> bytes:
    return hashlib.sha256(b"account:" + email.strip().lower().encode("utf-8")).digest()


def address_key(address: str) -> bytes:
    return hashlib.sha256(b"address:" + address.encode("utf-8")).digest()


_WAIT = """
    SELECT max(extract(epoch FROM window_start + $3::interval - now()))
      FROM signin_throttle
     WHERE window_start > now() - $3::interval
       AND ((throttle_key = $1 AND failures >= $4) OR (throttle_key = $2 AND failures >= $5))
"""

_FAIL = """
    INSERT INTO signin_throttle AS t (throttle_key, failures, window_start)
    SELECT k, 1, now() FROM unnest($1::bytea[]) AS k
    ON CONFLICT (throttle_key) DO UPDATE SET
        failures = CASE WHEN t.window_start <= now() - $2::interval THEN 1
                        ELSE t.failures + 1 END,
        window_start = CASE WHEN t.window_start <= now() - $2::interval THEN now()
                            ELSE t.window_start END
"""


async def seconds_to_wait(pool: asyncpg.Pool, email: str, address: str) -> int:
    """0 when a sign-in may be tried now, else whole seconds until it may."""
    wait = await pool.fetchval(
        _WAIT, account_key(email), address_key(address), WINDOW, ACCOUNT_LIMIT, ADDRESS_LIMIT
    )
    return max(1, math.ceil(float(wait))) if wait is not None else 0


async def record_failure(pool: asyncpg.Pool, email: str, address: str) -> None:
    await pool.execute(_FAIL, [account_key(email), address_key(address)], WINDOW)


async def clear_account(pool: asyncpg.Pool, email: str) -> None:
    await pool.execute("DELETE FROM signin_throttle WHERE throttle_key = $1", account_key(email))
