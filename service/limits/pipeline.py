"""Automatic pipelining of the admission's script calls (admit.lua, release.lua).

Every request costs two script calls; sent one by one, each is a write and a read on a
socket, and on a busy replica those system calls cost more than the scripts themselves.
`ScriptPipeline.call` queues a call and returns its reply; one sender task writes whatever
is queued in one write on one of redis-py's pooled connections (a pipeline without MULTI:
each script is atomic on its own), and while that batch is on the wire the next calls queue
up behind it. So:

- at low load a call goes out at once, alone (one batch in flight, nothing to wait for);
- under load the calls of many requests share one write and one read;
- batches leave one at a time, so calls reach Redis in the order they were made (a
  request's release is never overtaken by a later admission of the same caller).

A failed batch (connection refused or lost, a timeout) fails every call in it with that
error; the admission treats each exactly as it treated a failed single call (breaker,
compensating release). NOSCRIPT (Redis restarted, SCRIPT FLUSH) reloads the script and
retries that call once.

The commands are packed by hiredis (C) rather than by redis-py's pure-Python packer, which
cost ~60 µs a script call (13 arguments) under load; redis-py still owns the connections,
their timeouts and the reply parsing (hiredis as well).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
from hiredis import pack_command
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import NoScriptError, RedisError, ResponseError


class Script:
    """A Lua script of this package and its SHA1 once loaded into Redis."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
        self.sha: str | None = None

    async def load(self, redis: aioredis.Redis) -> str:
        sha: str = await redis.script_load(self.text)
        self.sha = sha
        return sha


def _new_future() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


@dataclass(slots=True)
class _Queued:
    script: Script
    keys: Sequence[str]
    args: Sequence[Any]
    reply: asyncio.Future[Any] = field(default_factory=_new_future)


class ScriptPipeline:
    def __init__(self, redis: aioredis.Redis) -> None:
        self._redis = redis
        self._queue: list[_Queued] = []
        self._sender: asyncio.Task[None] | None = None
        # The pipeline's own connection: taken from redis-py's pool once and kept (one
        # batch is on the wire at a time). Checking a connection out and in for every batch
        # cost two lock round trips, a health check and redis-py's observability hooks.
        self._conn: AbstractConnection | None = None
        self.batches = 0  # batches sent (tests/limits/test_pipeline.py reads both)
        self.calls = 0  # calls sent

    async def call(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """EVALSHA `script` with `keys` and `args`; its reply, or the error of its batch."""
        return await self.submit(script, keys, args)

    def submit(
        self, script: Script, keys: Sequence[str], args: Sequence[Any]
    ) -> asyncio.Future[Any]:
        """Queue the call now and return the future of its reply, for a caller that need
        not wait for it (a release): its place in the order is taken at once. The future
        always settles: every step of a round trip is bounded by the client's timeouts."""
        queued = _Queued(script, keys, args)
        self._queue.append(queued)
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(self._drain())
        return queued.reply

    async def close(self) -> None:
        """Let the batch on the wire finish (its callers are waiting for it), then give the
        connection back to the pool."""
        sender = self._sender
        if sender is not None:
            await asyncio.wait([sender], timeout=1.0)
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._redis.connection_pool.release(conn)

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                await self._send([q for q in batch if not q.reply.done()])
        finally:
            self._sender = None

    async def _send(self, batch: list[_Queued]) -> None:
        if not batch:
            return
        redis = self._redis
        try:
            shas = {id(q.script): q.script.sha or await q.script.load(redis) for q in batch}
            packed = b"".join(
                pack_command(("EVALSHA", shas[id(q.script)], len(q.keys), *q.keys, *q.args))
                for q in batch
            )
            replies = await self._round_trip(packed, len(batch))
        except Exception as err:  # the whole batch failed: connection, timeout, …
            for q in batch:
                _settle(q, err)
            return
        self.batches += 1
        self.calls += len(batch)
        for q, reply in zip(batch, replies, strict=True):
            if isinstance(reply, NoScriptError):
                reply = await self._retry(q)
            _settle(q, reply)

    async def _round_trip(self, packed: bytes, count: int) -> list[Any]:
        """Write the packed commands on the pipeline's connection and read their `count`
        replies (an error reply is returned in its place, not raised)."""
        conn = await self._connection()
        try:
            await conn.send_packed_command(packed, check_health=False)
            replies: list[Any] = []
            for _ in range(count):
                try:
                    replies.append(await conn.read_response())
                except ResponseError as err:
                    replies.append(err)
            return replies
        except BaseException:
            # Replies may be left unread: the next batch starts on a fresh connection.
            await conn.disconnect()
            raise

    async def _connection(self) -> AbstractConnection:
        """The pipeline's connection, checked as redis-py's pool checks one it hands out:
        connected, and holding no unread data (a server that closed it reads as EOF)."""
        conn = self._conn
        if conn is None:
            pool = self._redis.connection_pool
            taken: AbstractConnection = await pool.get_connection()  # type: ignore[no-untyped-call]
            self._conn = taken
            return taken
        await conn.connect()  # type: ignore[no-untyped-call]  # a no-op while connected
        try:
            stale = await conn.can_read()
        except (RedisError, OSError):  # closed under it: redis-py's ConnectionError
            stale = True
        if stale:
            await conn.disconnect()
            await conn.connect()  # type: ignore[no-untyped-call]
        return conn

    async def _retry(self, q: _Queued) -> Any:
        """One call again after NOSCRIPT: load the script, send it alone."""
        try:
            sha = await q.script.load(self._redis)
            return await self._redis.evalsha(sha, len(q.keys), *q.keys, *q.args)
        except Exception as err:
            return err


def _settle(q: _Queued, reply: Any) -> None:
    if q.reply.done():  # its caller gave up (cancelled) while the batch was out
        return
    if isinstance(reply, BaseException):
        q.reply.set_exception(reply)
    else:
        q.reply.set_result(reply)
