"""Sign-in sessions for the approval pages, kept server-side in PostgreSQL.

The browser holds a random 32-byte value in an HttpOnly, SameSite=Lax cookie (Secure, with
the `__Host-` prefix, when the public URL is https); the database holds only its SHA-256.
A session ends after 30 idle minutes and 30 days after sign-in, whichever comes first; every
page load that finds it alive moves its idle clock in the same statement. Each session has
its own CSRF token, sent in every form and compared on every POST.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass
from datetime import timedelta

from aiohttp import web

from service.app_keys import CONFIG, DB_POOL
from service.config import Config

IDLE_TIMEOUT = timedelta(minutes=30)
ABSOLUTE_TIMEOUT = timedelta(days=30)
_COOKIE = "elova_session"


@dataclass(frozen=True, slots=True)
class SignedIn:
    """The account behind a live session."""

    account_id: uuid.UUID
    email: str
    name: str
    csrf_token: str
    session_hash: bytes


def secure(cfg: Config) -> bool:
    return cfg.public_url.startswith("https://")


def cookie_name(cfg: Config, base: str = _COOKIE) -> str:
    # __Host- makes the browser insist on Secure, Path=/ and no Domain (no subdomain can set it).
    return f"__Host-{base}" if secure(cfg) else base


def set_cookie(
    response: web.StreamResponse, cfg: Config, name: str, value: str, max_age: int
) -> None:
    response.set_cookie(
        cookie_name(cfg, name),
        value,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="Lax",
        secure=secure(cfg),
    )


def _hash(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8")).digest()


async def start_session(
    request: web.Request, response: web.StreamResponse, account_id: uuid.UUID
) -> None:
    """A new session (never a reused id: sign-in always mints a fresh one) in a cookie."""
    value = secrets.token_urlsafe(32)
    pool = request.app[DB_POOL]
    # Housekeeping on the way: the account's ended sessions are of no further use.
    await pool.execute(
        "DELETE FROM signin_sessions WHERE account_id = $1"
        " AND (expires_at <= now() OR last_seen_at <= now() - $2::interval)",
        account_id,
        IDLE_TIMEOUT,
    )
    await pool.execute(
        "INSERT INTO signin_sessions (session_hash, account_id, csrf_token, expires_at)"
        " VALUES ($1, $2, $3, now() + $4)",
        _hash(value),
        account_id,
        secrets.token_urlsafe(32),
        ABSOLUTE_TIMEOUT,
    )
    set_cookie(response, request.app[CONFIG], _COOKIE, value, int(ABSOLUTE_TIMEOUT.total_seconds()))


_TOUCH = """
    UPDATE signin_sessions s SET last_seen_at = now()
      FROM accounts a
     WHERE s.session_hash = $1 AND a.id = s.account_id
       AND s.expires_at > now() AND s.last_seen_at > now() - $2::interval
 RETURNING s.account_id, a.email, a.name, s.csrf_token
"""


async def current_session(request: web.Request) -> SignedIn | None:
    """The live session of this request's cookie (its idle clock restarted), or None."""
    value = request.cookies.get(cookie_name(request.app[CONFIG]))
    if not value or len(value) > 100:
        return None
    digest = _hash(value)
    row = await request.app[DB_POOL].fetchrow(_TOUCH, digest, IDLE_TIMEOUT)
    if row is None:
        return None
    return SignedIn(row["account_id"], row["email"], row["name"], row["csrf_token"], digest)


async def end_session(
    request: web.Request, response: web.StreamResponse, session: SignedIn
) -> None:
    await request.app[DB_POOL].execute(
        "DELETE FROM signin_sessions WHERE session_hash = $1", session.session_hash
    )
    cfg = request.app[CONFIG]
    response.del_cookie(
        cookie_name(cfg), path="/", secure=secure(cfg), httponly=True, samesite="Lax"
    )


def csrf_matches(expected: str, sent: object) -> bool:
    return (
        isinstance(sent, str)
        and bool(sent)
        and hmac.compare_digest(expected.encode(), sent.encode())
    )
