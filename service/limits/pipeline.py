"""Automatic pipelining of the admission's script calls (admit.lua, release.lua).

`ScriptPipeline` queues each call, and one sender task writes whatever is queued as one
batch on a kept connection to each server the route names (redis_routes.py), then follows
the replies that say a call did not run (NOSCRIPT, MOVED, ASK, TRYAGAIN). Why it batches,
and why it reads and writes below redis-py's per-command calls: docs/decisions/limits.md,
"Shape" (from "Pipelined script calls" to "One kept connection") and "Redis engines
(issue 12)".
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import hiredis
import redis.asyncio as aioredis
from hiredis import pack_command
from redis._parsers.hiredis import NOT_ENOUGH_DATA
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    MovedError,
    NoScriptError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from service.limits.redis_routes import Route, route_for

# A batch's redirected calls are sent again at most this many rounds, and within the bound
# of one call (ScriptPipeline's `bound`); a TRYAGAIN waits this long before its next round.
_ROUNDS = 32
_TRYAGAIN_PAUSE = 0.02
_REDIRECTS = (NoScriptError, MovedError, AskError, TryAgainError)
_READ_SIZE = 65536


class Script:
    """A Lua script of this package and its SHA1 (what SCRIPT LOAD answers, known here)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
        self.digest = hashlib.sha1(self.text.encode()).hexdigest()
        self.sha: str | None = self.digest  # what EVALSHA sends (tests may spoil it)


def evalsha(script: Script, keys: Sequence[str], args: Sequence[Any]) -> bytes:
    """The packed EVALSHA of `script` (what the pipeline writes)."""
    sha = script.sha or script.digest
    return bytes(pack_command(("EVALSHA", sha, len(keys), *keys, *args)))


@dataclass(slots=True)
class _Queued:
    script: Script
    packed: bytes  # the EVALSHA as written (sent again as is after a redirect)
    deadline: float  # loop time by which its reply must have settled
    reply: asyncio.Future[Any]
    slot: int  # the Cluster hash slot of its keys: which master it goes to


def _loads(batch: Sequence[_Queued]) -> list[bytes]:
    scripts = {id(q.script): q.script for q in batch}
    return [_pack("SCRIPT", "LOAD", s.text) for s in scripts.values()]


def _pack(*words: Any) -> bytes:
    return bytes(pack_command(words))


class ScriptPipeline:
    """The admission's script calls, written together.

    `call` queues a call (packed here with hiredis; the admission hands in its calls packed
    by script_calls.py, through `submit`) and returns its reply; one sender task writes
    whatever is queued in one write on a kept connection to each server (a pipeline without
    MULTI: each script is atomic on its own), and while that batch is on the wire the next
    calls queue up behind it. So:

    - at low load a call goes out at once, alone (one batch in flight, nothing to wait for);
    - under load the calls of many requests share one write and one read;
    - batches leave one at a time, so calls reach each server in the order they were made (a
      request's release is never overtaken by a later admission of the same account).

    A failed batch (connection refused or lost, a timeout) fails every call in it with that
    error; the admission treats each exactly as it treated a failed single call (breaker,
    compensating release). In a Cluster a batch is split by master, and each master's calls
    go out on its own connection at the same time.

    The connection is the pipeline's own: the route takes it once (from the client's pool,
    or in cluster mode from the node that owns the slot), keeps it between batches and gives
    it back only on close. It is a redis-py connection (connect, AUTH, TLS, Sentinel), but a
    batch is written on its stream and its replies taken from its hiredis reader directly,
    each socket read bounded by the client's timeout. Each call is bounded as a whole by one
    timer a batch (its oldest call's deadline).
    """

    def __init__(
        self,
        redis: aioredis.Redis | RedisCluster,
        *,
        bound: float = 0.75,
    ) -> None:
        self._redis = redis
        # The pipeline's own connections, kept by the route (one a server; one batch is on
        # the wire at a time). Checking a connection out and in for every batch cost two
        # lock round trips, a health check and redis-py's observability hooks.
        self.route: Route = route_for(redis)
        self.bound = bound  # the longest one call may take, redirects included
        self._queue: list[_Queued] = []
        self._sender: asyncio.Task[None] | None = None
        self.batches = 0  # batches sent (tests/limits/test_pipeline.py reads both)
        self.calls = 0  # calls sent
        self.redirects = 0  # replies followed (NOSCRIPT, MOVED, ASK, TRYAGAIN)
        self.followed: Counter[str] = Counter()  # … by kind (tests read it)

    async def call(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """EVALSHA `script` with `keys` (one hash slot) and `args`; its reply, or the
        error of its batch."""
        slot = key_slot(keys[0].encode()) if keys else 0
        return await self.submit(script, evalsha(script, keys, args), slot)

    def submit(self, script: Script, packed: bytes, slot: int = 0) -> asyncio.Future[Any]:
        """Queue one packed EVALSHA of `script` now and return the future of its reply:
        its place in the order is taken at once, and the call is sent even if the future
        is cancelled (its caller went away) or left. The future settles within `bound` (a
        TimeoutError then): the sender bounds each batch by its oldest call's deadline."""
        loop = asyncio.get_running_loop()
        reply = loop.create_future()
        self._queue.append(_Queued(script, packed, loop.time() + self.bound, reply, slot))
        if self._sender is None:
            self._sender = loop.create_task(self._drain())
        return reply

    async def preload(self, scripts: Sequence[Script]) -> None:
        """SCRIPT LOAD each script on every server the route sends calls to."""
        for conn in await self.route.connections():
            try:
                await conn.send_packed_command(
                    b"".join(_pack("SCRIPT", "LOAD", s.text) for s in scripts),
                    check_health=False,
                )
                for _ in scripts:
                    await conn.read_response()
            except BaseException:
                await self.route.lost(conn)
                raise

    async def close(self) -> None:
        """Let the batch on the wire finish (its callers are waiting for it), then give the
        connection back."""
        sender = self._sender
        if sender is not None:
            await asyncio.wait([sender], timeout=1.0)
        await self.route.close()

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                try:
                    # Calls whose caller stopped waiting (cancelled) are sent too: a
                    # release must reach Redis anyway, and an admission's caller sends
                    # a compensating release after it.
                    await self._send(batch)
                except BaseException:  # the sender itself was cancelled (shutdown)
                    for q in [*batch, *self._queue]:
                        q.reply.cancel()
                    self._queue = []
                    raise
        finally:
            self._sender = None

    async def _send(self, batch: list[_Queued]) -> None:
        if not batch:
            return
        # One timer a batch, not one a call: the oldest call's deadline is the earliest. A
        # call already past its own is answered now but still sent: a release must reach
        # Redis however late, and a late admission is compensated by its caller.
        loop = asyncio.get_running_loop()
        now = loop.time()
        for q in batch:
            if q.deadline <= now:
                _settle(q, TimeoutError("the admission's Redis call waited past its bound"))
        waiting = next((q for q in batch if not q.reply.done()), None)
        deadline = now + self.bound if waiting is None else waiting.deadline
        try:
            async with asyncio.timeout_at(deadline):
                await self._send_bounded(batch)
        except Exception as err:  # the whole batch failed: connection, timeout, …
            for q in batch:
                _settle(q, err)

    async def _send_bounded(self, batch: list[_Queued]) -> None:
        await self.route.ready()
        groups = self._by_owner(batch)
        self.batches += 1
        self.calls += len(batch)
        if len(groups) == 1:
            await self._send_group(groups[0])
            return
        # A Cluster: each master's calls on its own connection, all at once. A failed
        # exchange fails its own calls only.
        outcomes = await asyncio.gather(
            *(self._send_group(calls) for calls in groups), return_exceptions=True
        )
        for calls, outcome in zip(groups, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                for q in calls:
                    _settle(q, outcome)

    def _by_owner(self, calls: list[_Queued]) -> list[list[_Queued]]:
        """The calls grouped by the server that serves their slot, each in call order."""
        if self.route.one_server:
            return [calls]
        owner = self.route.owner
        groups: dict[str | None, list[_Queued]] = {}
        for q in calls:
            groups.setdefault(owner(q.slot), []).append(q)
        return list(groups.values())

    async def _send_group(self, calls: list[_Queued]) -> None:
        """One server's calls in one exchange; redirected ones are followed."""
        conn = await self.route.connection(calls[0].slot)
        replies = await self._exchange(conn, [q.packed for q in calls], len(calls))
        redirected = self._settle_round(calls, replies)
        if redirected:
            await self._follow(redirected)

    async def _follow(self, redirected: list[tuple[_Queued, ResponseError]]) -> None:
        """Send redirected calls again (in their order) until each has a real reply, or
        the rounds or the time run out (then each gets its last reply: an error).

        NOSCRIPT (Redis restarted, SCRIPT FLUSH, a node that never ran the script) loads the
        script on that same connection and sends the call again; MOVED (the slot now lives
        on another master) lets the route refresh the slot map and move the kept connection,
        then sends it again; ASK (the slot is being migrated, this key not here) sends ASKING
        and the call to the importing node; TRYAGAIN (a multi-key call during a migration)
        waits a moment and sends it again."""
        loop = asyncio.get_running_loop()
        rounds = 0
        while redirected:
            self.redirects += len(redirected)
            self.followed.update(type(err).__name__ for _, err in redirected)
            rounds += 1
            # The batch's timer is the hard bound; stopping before it answers each call
            # with its last reply (a NOSCRIPT, a TRYAGAIN …) rather than a bare timeout.
            if rounds > _ROUNDS or loop.time() > redirected[0][0].deadline - _TRYAGAIN_PAUSE:
                break
            try:
                redirected = await self._round(redirected)
            except Exception as err:
                for q, _ in redirected:
                    _settle(q, err)
                return
        for q, reply in redirected:
            _settle(q, reply)

    async def _round(
        self, redirected: list[tuple[_Queued, ResponseError]]
    ) -> list[tuple[_Queued, ResponseError]]:
        errors = [err for _, err in redirected]
        moved = next((e for e in reversed(errors) if isinstance(e, MovedError)), None)
        if moved is not None and not await self.route.moved(moved):
            redirected = self._give_up(redirected, MovedError)  # not a cluster client
            errors = [err for _, err in redirected]
        if any(isinstance(e, TryAgainError) for e in errors):
            await asyncio.sleep(_TRYAGAIN_PAUSE)
        asked = [(q, e) for q, e in redirected if isinstance(e, AskError)]
        again = [q for q, e in redirected if not isinstance(e, AskError)]
        out: list[tuple[_Queued, ResponseError]] = []
        for calls in self._by_owner(again):  # a MOVED slot's calls go to its new owner
            conn = await self.route.connection(calls[0].slot)
            loads = _loads(calls)
            replies = await self._exchange(
                conn, [*loads, *(q.packed for q in calls)], len(loads) + len(calls)
            )
            out += self._settle_round(calls, replies[len(loads) :])
        if asked:
            out += await self._ask(asked)
        return out

    def _give_up(
        self, redirected: list[tuple[_Queued, ResponseError]], kind: type[ResponseError]
    ) -> list[tuple[_Queued, ResponseError]]:
        """Settle the calls the route would not follow (`kind`); the rest go on."""
        rest = []
        for q, err in redirected:
            if isinstance(err, kind):
                _settle(q, err)
            else:
                rest.append((q, err))
        return rest

    async def _ask(
        self, asked: list[tuple[_Queued, AskError]]
    ) -> list[tuple[_Queued, ResponseError]]:
        """ASKING and the call, on the importing node, for each call ASK redirected."""
        target = await self.route.asking(asked[-1][1])
        if target is None:
            return self._give_up(list(asked), AskError)
        conn, lent = target
        calls = [q for q, _ in asked]
        loads = _loads(calls)
        asking = _pack("ASKING")
        packed = [*loads]
        for q in calls:
            packed += [asking, q.packed]
        try:
            replies = await self._exchange(conn, packed, len(packed))
        finally:
            self.route.lend_back(lent, conn)
        return self._settle_round(calls, replies[len(loads) + 1 :: 2])

    def _settle_round(
        self, calls: list[_Queued], replies: list[Any]
    ) -> list[tuple[_Queued, ResponseError]]:
        left: list[tuple[_Queued, ResponseError]] = []
        for q, reply in zip(calls, replies, strict=True):
            if isinstance(reply, _REDIRECTS):
                left.append((q, reply))
            else:
                _settle(q, reply)
        return left

    async def _exchange(
        self, conn: AbstractConnection, packed: list[bytes], count: int
    ) -> list[Any]:
        """Write the packed commands on `conn` and read their `count` replies (an error
        reply is returned in its place, not raised), each read from the socket within the
        connection's timeout (as redis-py bounds each of its reads)."""
        try:
            step = getattr(conn, "socket_timeout", None)
            async with asyncio.timeout(step) as bounded:
                await _write(conn, b"".join(packed))
                return await read_replies(conn, count, bounded, step)
        except BaseException:
            await self.route.lost(conn)
            raise


async def _write(conn: AbstractConnection, data: bytes) -> None:
    """Write `data` on the connection's stream (redis-py's `send_packed_command` makes a
    task a write, for its timeout; the exchange's timeout covers this one). A connection
    lost meanwhile is found by the read that follows: end of file."""
    writer = getattr(conn, "_writer", None)
    if writer is None:
        await conn.send_packed_command(data, check_health=False)
        return
    writer.write(data)
    if writer.transport.get_write_buffer_size():  # more than the socket took at once
        await writer.drain()


async def read_replies(
    conn: AbstractConnection,
    count: int,
    bounded: asyncio.Timeout | None = None,
    step: float | None = None,
) -> list[Any]:
    """`count` replies from `conn`, errors in their place. With hiredis (a dependency of
    this package) they are taken from its reader as the socket delivers them; redis-py's
    `read_response`, which we use otherwise, costs a timeout context and several
    awaits a reply. `bounded` (the exchange's timeout, `step` from the write) is moved on
    to `step` from now before each further read (a batch's replies mostly come in one
    read, which then moves no timer)."""
    parser = conn._parser
    reader = getattr(parser, "_reader", None)
    stream = getattr(parser, "_stream", None)
    if not isinstance(reader, hiredis.Reader) or stream is None:
        return await _read_one_by_one(conn, count)
    replies: list[Any] = []
    reads = 0
    while len(replies) < count:
        reply = reader.gets()
        if reply is False or reply is NOT_ENOUGH_DATA:
            if reads and bounded is not None and step is not None:  # each read has its own
                bounded.reschedule(asyncio.get_running_loop().time() + step)
            reads += 1
            data = await stream.read(_READ_SIZE)
            if not data:
                raise RedisConnectionError("Redis closed the connection")
            reader.feed(data)
            continue
        if isinstance(reply, RedisConnectionError):  # what redis-py raises, too
            raise reply
        replies.append(reply)
    return replies


async def _read_one_by_one(conn: AbstractConnection, count: int) -> list[Any]:
    replies: list[Any] = []
    for _ in range(count):
        try:
            replies.append(await conn.read_response())
        except ResponseError as err:
            replies.append(err)
    return replies


def _settle(q: _Queued, reply: Any) -> None:
    if q.reply.done():  # its caller gave up (cancelled) while the batch was out
        return
    if isinstance(reply, BaseException):
        q.reply.set_exception(reply)
    else:
        q.reply.set_result(reply)
