"""A steady load of tools/call against real `elova-mcp serve` processes while a dependency
fails, and what a client would check of every answer: how long it took, whether it is a
success, a retryable unavailable answer or something else, and whether a success holds only
the caller's own records (a wrong answer otherwise)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field

import aiohttp

from tests.hostile.wire import Mcp, Reply, check_answer
from tests.hostile.world import Granted, World, uuids_in

# What a client may be told while the record store or the limiter is away: HTTP 503 with
# Retry-After (JSON-RPC -32600 "Service Unavailable"), or a retryable tool error.
RETRYABLE = frozenset({"503:-32600", "UNAVAILABLE", "DEADLINE_EXCEEDED"})

# The replicas' settings under such a load: a short deadline, limits no load here reaches.
DEADLINE = 5.0
# A call's answer within the deadline, plus what the client's side of a loaded 2-core
# machine adds (HTTP, scheduling): past this it is late.
LATE = DEADLINE + 1.0
ENV = {
    "LIMIT_APPROVAL_PER_MINUTE": "1000000",
    "LIMIT_ACCOUNT_CONCURRENCY": "16",
    "LIMIT_GLOBAL_CONCURRENCY": "16",
    "REQUEST_DEADLINE_SECONDS": str(DEADLINE),
}
# The pool connections a replica has handed out (none may be left once the load ends).
IN_USE = 'elova_mcp_db_pool_connections{state="in_use"}'


@dataclass
class Seen:
    at: float  # seconds since the load started, when the call was sent
    seconds: float  # until its answer
    code: str  # "ok", a tool error code, "<status>:<JSON-RPC code>"
    wrong: bool = False  # a success with records of another approval


@dataclass
class Load:
    mcp: Mcp
    world: World
    granted: Granted
    workers: int = 4
    started: float = field(default_factory=time.monotonic)
    seen: list[Seen] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    def now(self) -> float:
        return time.monotonic() - self.started

    async def run(self) -> None:
        await asyncio.gather(*(self._one() for _ in range(self.workers)))

    def stop(self) -> None:
        self._stop.set()

    async def _one(self) -> None:
        allowed = self.world.ids_of(self.granted) | {str(w) for w in self.granted.workspaces}
        arguments = {"workspaceId": str(self.granted.workspaces[0]), "limit": 5}
        while not self._stop.is_set():
            at = self.now()
            try:
                reply = await self.mcp.call(self.granted.token, "get_many_executions", arguments)
            except (aiohttp.ClientError, TimeoutError) as err:
                self.seen.append(Seen(at, self.now() - at, f"client:{type(err).__name__}"))
                continue
            self.seen.append(_judged(reply, at, self.now() - at, allowed))
            await asyncio.sleep(0.02)

    def between(self, start: float, end: float) -> list[Seen]:
        return [s for s in self.seen if start <= s.at < end]

    def overlapping(self, start: float, end: float) -> list[Seen]:
        """The calls in flight at some moment of [start, end): sent before `end`, answered
        after `start` (a call sent just before a loss and stalled by it is one of them)."""
        return [s for s in self.seen if s.at < end and s.at + s.seconds > start]

    def first_ok_after(self, moment: float) -> float | None:
        """Seconds from `moment` until the first success of a call sent after it."""
        after = [s.at + s.seconds for s in self.seen if s.at >= moment and s.code == "ok"]
        return min(after) - moment if after else None

    def summary(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.seen:
            counts[s.code] = counts.get(s.code, 0) + 1
        return counts


def _judged(reply: Reply, at: float, seconds: float, allowed: set[str]) -> Seen:
    if reply.status != 503:
        check_answer(reply)
    else:
        assert reply.headers.get("Retry-After", "").isdigit(), reply.headers
        return Seen(at, seconds, f"503:{reply.json.get('error', {}).get('code')}")
    if reply.status != 200:
        return Seen(at, seconds, f"{reply.status}:{reply.json.get('error', {}).get('code')}")
    if "error" in reply.json:
        return Seen(at, seconds, f"200:{reply.json['error'].get('code')}")
    if reply.result.get("isError"):
        code = reply.error_code
        if code in RETRYABLE:
            assert reply.result["_meta"]["retryable"] is True, reply.body[:300]
        return Seen(at, seconds, code)
    wrong = not uuids_in(reply.structured) <= allowed
    return Seen(at, seconds, "ok", wrong)


async def metric(session: aiohttp.ClientSession, port: int, name: str) -> float:
    """One sample of the replica's /metrics (`name` with its labels, e.g. `x{state="idle"}`)."""
    async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
        for line in (await resp.text()).splitlines():
            sample = line.split(" ")[0]
            if sample == name or ("{" not in name and sample.startswith(name + "{")):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exported")


async def ready(session: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, str], float]:
    """/readyz: its status, body and how long it took to answer."""
    started = time.monotonic()
    async with session.get(url + "/readyz") as resp:
        body = await resp.json()
        return resp.status, body, time.monotonic() - started


async def readiness(
    session: aiohttp.ClientSession, url: str, expect: int, *, within: float, **body: str
) -> float:
    """Seconds until /readyz answers `expect` (with `body`'s fields), each answer within 5 s;
    fails when it has not after `within` seconds."""
    started = time.monotonic()
    while True:
        status, answer, took = await ready(session, url)
        assert took < 5.0, f"/readyz took {took:.1f} s"
        elapsed = time.monotonic() - started
        if status == expect and all(answer.get(k) == v for k, v in body.items()):
            return elapsed
        assert elapsed < within, f"/readyz still {status} {answer} after {elapsed:.1f} s"
        await asyncio.sleep(0.1)


async def drained(
    load: Load, running: Awaitable[None], session: aiohttp.ClientSession, port: int
) -> tuple[float, float]:
    """Stop the load, let the last releases land, and read what the replica still holds:
    (pool connections in use, requests in flight)."""
    load.stop()
    await asyncio.wait_for(running, 30)
    await asyncio.sleep(1.0)  # the last releases
    in_use = await metric(session, port, IN_USE)
    return in_use, await metric(session, port, "elova_mcp_inflight_requests")
