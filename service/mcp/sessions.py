"""Sessions of the 2025 revisions: self-verifying ids, terminations shared in PostgreSQL.

`SessionStore` issues and verifies the ids (bound to their approval, expiring after
`SESSION_TTL_SECONDS`), records a DELETE in `mcp_terminated_sessions`, which every replica
consults, and answers whether a session was ended by lookups that concurrent requests
share. The choices: docs/decisions/transport.md, "Sessions"; the cost of the shared
lookups: docs/benchmarks.md, The session path.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

import asyncpg

from service.crypto import b64url, b64url_strict, derive_key, key_id
from service.mcp.versions import SESSION_VERSIONS

SESSION_TTL_SECONDS = 24 * 3600
_FORMAT = 1
_BODY = struct.Struct(">B4sB16sI8s")
_MAC_LEN = 16
_MAX_ID_CHARS = 200  # far above a real id; longer header values are not even decoded
_TERMINATED = (
    "SELECT session_digest FROM mcp_terminated_sessions WHERE session_digest = ANY($1::bytea[])"
)


def derive_session_key(signing_key_pem: bytes) -> bytes:
    return derive_key(signing_key_pem, "session")


@dataclass(frozen=True)
class Session:
    id: str
    protocol_version: str
    approval_id: UUID
    expires_at: int

    @property
    def digest(self) -> bytes:
        return hashlib.sha256(self.id.encode("ascii")).digest()


class SessionStore:
    """Session ids and their terminations.

    Wire form of a session id: base64url without padding of

        version (1) | key id (4) | revision index (1) | approval id (16) | expiry (4, unix s)
        | nonce (8) | HMAC-SHA256 of all before, first 16 bytes

    Any replica holding the signing key verifies an id without shared memory. An id is bound
    to the approval it was created under (used with another approval's token it is unknown,
    404) and expires after `ttl_seconds`. `terminate` records the id's digest in
    `mcp_terminated_sessions`, which every replica consults, so a terminated session is 404
    everywhere until it would have expired anyway.

    Concurrent requests share those consultations (`is_terminated`): while one is in
    flight, every request that arrives waits for the NEXT one, which starts after the
    current one ends and looks up all their digests in one statement. Each request is
    therefore answered by a lookup that began after it arrived (a termination committed
    before a request is seen by it, on any replica), and under load a session request costs
    a share of one round trip instead of one of its own.
    """

    def __init__(
        self,
        current: bytes,
        previous: Sequence[bytes] = (),
        ttl_seconds: int = SESSION_TTL_SECONDS,
        lookup_timeout_seconds: float = 10.0,
    ) -> None:
        self._current_id = key_id(current)
        self._current = current
        self._keys = {key_id(k): k for k in (*previous, current)}
        self.ttl_seconds = ttl_seconds
        # The requests waiting for the next termination lookup: (digest, its answer).
        self._next: list[tuple[bytes, asyncio.Future[bool]]] = []
        self._looking = False
        self._lookups: asyncio.Task[None] | None = None  # held: the loop keeps tasks weakly
        # A lookup no request waits for any more still ends: it is bounded on its own.
        self._lookup_timeout = lookup_timeout_seconds

    def issue(self, protocol_version: str, approval_id: UUID, now: float | None = None) -> str:
        expires = int(now if now is not None else time.time()) + self.ttl_seconds
        body = _BODY.pack(
            _FORMAT,
            self._current_id,
            SESSION_VERSIONS.index(protocol_version),
            approval_id.bytes,
            expires,
            os.urandom(8),
        )
        mac = hmac.new(self._current, body, hashlib.sha256).digest()[:_MAC_LEN]
        return b64url(body + mac)

    def verify(
        self, session_id: str, approval_id: UUID, now: float | None = None
    ) -> Session | None:
        """The session this id names for this approval, or None (forged, expired, foreign)."""
        raw = b64url_strict(session_id) if len(session_id) <= _MAX_ID_CHARS else None
        if raw is None or len(raw) != _BODY.size + _MAC_LEN:
            return None
        body, mac = raw[: _BODY.size], raw[_BODY.size :]
        fmt, kid, revision, approval, expires, _nonce = _BODY.unpack(body)
        key = self._keys.get(kid)
        if fmt != _FORMAT or key is None or revision >= len(SESSION_VERSIONS):
            return None
        expected = hmac.new(key, body, hashlib.sha256).digest()[:_MAC_LEN]
        if not hmac.compare_digest(mac, expected):
            return None
        if expires <= (now if now is not None else time.time()):
            return None
        if approval != approval_id.bytes:
            return None
        return Session(session_id, SESSION_VERSIONS[revision], approval_id, expires)

    async def is_terminated(self, pool: asyncpg.Pool, session: Session) -> bool:
        """Whether the session was ended (DELETE, on any replica), by a lookup that began
        after this call: the next one, shared with the requests that wait for it."""
        mine: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._next.append((session.digest, mine))
        if not self._looking:
            self._looking = True
            self._lookups = asyncio.get_running_loop().create_task(self._look_up_while_waited(pool))
        return await mine

    async def _look_up_while_waited(self, pool: asyncpg.Pool) -> None:
        waiting: list[tuple[bytes, asyncio.Future[bool]]] = []
        try:
            while self._next:
                waiting, self._next = self._next, []
                try:
                    digests = list({d for d, _ in waiting})
                    rows = await pool.fetch(_TERMINATED, digests, timeout=self._lookup_timeout)
                except Exception as err:
                    _settle(waiting, None, err)
                else:
                    _settle(waiting, {r["session_digest"] for r in rows}, None)
                waiting = []
        finally:
            self._looking = False
            for _, each in waiting:  # the lookup itself was cancelled (the app stops)
                each.cancel()

    async def terminate(self, pool: asyncpg.Pool, session: Session) -> None:
        async with pool.acquire() as conn:
            await conn.execute(
                """INSERT INTO mcp_terminated_sessions (session_digest, expires_at)
                   VALUES ($1, $2) ON CONFLICT (session_digest) DO NOTHING""",
                session.digest,
                datetime.fromtimestamp(session.expires_at, UTC),
            )
            # Housekeeping in small bites: rows past their id's expiry prove nothing.
            await conn.execute(
                """DELETE FROM mcp_terminated_sessions WHERE session_digest IN (
                       SELECT session_digest FROM mcp_terminated_sessions
                       WHERE expires_at < now() LIMIT 100)"""
            )


def _settle(
    waiting: list[tuple[bytes, asyncio.Future[bool]]],
    ended: set[bytes] | None,
    error: Exception | None,
) -> None:
    """Give one lookup's answer, or its failure, to every request still waiting for it."""
    for digest, each in waiting:
        if each.done():  # a request that went away cancelled its own future
            continue
        if ended is None:
            each.set_exception(error or RuntimeError("no lookup"))
        else:
            each.set_result(digest in ended)
