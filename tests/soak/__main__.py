"""Soak: two `elova-mcp serve` replicas under mixed load for ten minutes (`make soak`).

    python -m tests.soak [--minutes 10] [--clients 8] [--rolling [--roll-every 20]]

Mixed load: every tool, cursor walks, the 2026-07-28 era and 2025-11-25 sessions (opened
and closed), through three approvals of two accounts, against a fresh database on the
machine's PostgreSQL and a fresh key prefix on its Redis. Clients honour Retry-After.

Passes (exit 0) when: no answer other than success or 429; resident memory (RSS), open file
descriptors and PostgreSQL connections of each replica do not grow from the first third of
the run (after warm-up) to the last; no admission slot is held once the load stops; the
in-flight gauges are back to zero; no client crashed. The figures are printed either way.

`--rolling` (`make soak SOAK_ARGS=--rolling`): three replicas behind HAProxy with the shipped
deploy/haproxy.cfg, the clients calling through it and refreshing every 10 s, and one replica
restarted (SIGTERM, drain, exit, start on the same port) every `--roll-every` seconds, in
turn (tests/soak/rolling.py). A connection error counts as a failed answer; the soak also
fails when a roll does not complete in order (readiness down, HAProxy marks it DOWN,
listener closed, exit, ready, UP).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import redis.asyncio as aioredis

from service.auth.tokens import TokenService
from service.config import Config
from tests.hostile.processes import Replicas
from tests.hostile.wire import Mcp, Reply, modern_body, modern_headers
from tests.hostile.world import Granted, World, build_world
from tests.soak.rolling import ROLL_EVERY_SECONDS, Roller
from tests.support.haproxy import OwnHAProxy
from tests.support.leases import held_leases
from tests.support.server import free_port
from tests.support.services import REDIS_URL, create_database, drop_database

SAMPLE_SECONDS = 10.0
LIMITS = {
    "LIMIT_GLOBAL_CONCURRENCY": "8",
    "LIMIT_ACCOUNT_CONCURRENCY": "4",
    "LIMIT_APPROVAL_PER_MINUTE": "3000",
    "DB_POOL_MAX": "6",
    "EXPECTED_REPLICAS": "2",
}
# Refreshes are frequent while rolling, so that some cross every restart.
ROLLING_REFRESH_AFTER = 10.0
# Growth allowed from the first third to the last (medians): allocator noise, not a leak.
RSS_GROWTH_BYTES = 12 * 1024 * 1024
FD_GROWTH = 8
PG_CONNECTION_GROWTH = 2


@dataclass
class Sample:
    at: float
    rss: list[int]
    fds: list[int]
    pg_connections: int
    held_slots: int


@dataclass
class Stats:
    answers: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def record(self, reply: Reply, seconds: float) -> None:
        if reply.status == 429:
            self.answers["429"] += 1
            return
        if reply.status in (200, 202, 204) and (
            reply.status != 200 or not reply.json.get("result", {}).get("isError")
        ):
            self.answers["ok"] += 1
            self.latencies.append(seconds)
            return
        self.answers[f"{reply.status}"] += 1
        if len(self.failures) < 20:
            self.failures.append(reply.body[:300].decode("utf-8", "replace"))

    def broken(self, what: str, err: BaseException) -> None:
        """A request that got no answer (a connection error), or a client that crashed."""
        self.answers[what] += 1
        if len(self.failures) < 20:
            self.failures.append(f"{what}: {err!r}")


def _header(reply: Reply, name: str) -> str | None:
    """A header of `reply` whatever its case (HAProxy sends header names in lower case)."""
    return next((v for k, v in reply.headers.items() if k.lower() == name.lower()), None)


class Tokens:
    """An approval's tokens, shared by the clients using it: refreshed at the token endpoint
    before the 5-minute access token expires, by one client at a time (rotation: two
    refreshes with the same refresh token would revoke the family)."""

    REFRESH_AFTER = float(os.environ.get("ELOVA_SOAK_REFRESH_AFTER", "180"))

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        granted: Granted,
        refresh_after: float = REFRESH_AFTER,
    ) -> None:
        self.session, self.base_url, self.granted = session, base_url, granted
        self.refresh_after = refresh_after
        self.access, self.refresh_token = granted.token, granted.refresh_token
        self.issued_at = time.monotonic()
        self.lock = asyncio.Lock()
        self.refreshes = 0

    async def current(self) -> str:
        if time.monotonic() - self.issued_at > self.refresh_after:
            async with self.lock:
                if time.monotonic() - self.issued_at > self.refresh_after:
                    await self._refresh()
        return self.access

    async def _refresh(self) -> None:
        form = {"grant_type": "refresh_token", "refresh_token": self.refresh_token,
                "client_id": self.granted.approval.client_id}  # fmt: skip
        async with self.session.post(self.base_url + "/token", data=form) as resp:
            body = await resp.json()
            if resp.status != 200:
                raise RuntimeError(f"refresh refused: {resp.status} {body}")
        self.access, self.refresh_token = body["access_token"], body["refresh_token"]
        self.issued_at = time.monotonic()
        self.refreshes += 1


class Client:
    """One simulated MCP client: a random walk over the tools through one approval."""

    def __init__(
        self, mcps: list[Mcp], tokens: Tokens, world: World, stats: Stats, seed: int
    ) -> None:
        self.mcps, self.tokens, self.world, self.stats = mcps, tokens, world, stats
        self.granted = tokens.granted
        self.rng = random.Random(seed)

    async def send(self, mcp: Mcp, body: bytes, headers: dict[str, str]) -> Reply:
        started = time.perf_counter()
        try:
            reply = await mcp.post(body, headers)
        except (aiohttp.ClientError, TimeoutError) as err:
            self.stats.broken("connection error", err)
            return Reply(0, {}, b"")
        self.stats.record(reply, time.perf_counter() - started)
        if reply.status == 429:
            await asyncio.sleep(min(float(_header(reply, "Retry-After") or "1"), 1.0))
        return reply

    async def call(self, tool: str, arguments: dict[str, Any]) -> Reply:
        mcp = self.rng.choice(self.mcps)
        body = modern_body("tools/call", {"name": tool, "arguments": arguments})
        token = await self.tokens.current()
        return await self.send(mcp, body, modern_headers(token, "tools/call", tool))

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            step = self.rng.choice([self.inventory, self.walk, self.stats_call, self.session])
            await step()

    def _workspace(self) -> str:
        return str(self.rng.choice(self.granted.workspaces))

    async def inventory(self) -> None:
        ws = self._workspace()
        tenant = next(t for t in self.world.tenants.values() if ws in t.instances)
        await self.call("get_many_workspaces", {})
        await self.call("get_workspace", {"workspaceId": ws})
        await self.call("get_many_instances", {"workspaceId": ws})
        inst = self.rng.choice(tenant.instances[ws])["id"]
        await self.call("get_many_sync_jobs", {"workspaceId": ws, "instanceId": inst})
        wf = self.rng.choice(tenant.workflows[ws])["id"]
        await self.call("get_workflow", {"workspaceId": ws, "workflowId": wf})
        ex = self.rng.choice(tenant.executions[ws])["id"]
        await self.call("get_execution", {"workspaceId": ws, "executionId": ex})

    async def walk(self) -> None:
        tool = self.rng.choice(["get_many_executions", "get_many_workflows"])
        arguments: dict[str, Any] = {"workspaceId": self._workspace(), "limit": 2}
        for _ in range(10):
            reply = await self.call(tool, arguments)
            if reply.status != 200 or reply.result.get("isError"):
                return
            cursor = reply.result["structuredContent"]["nextCursor"]
            if cursor is None:
                return
            arguments["cursor"] = cursor

    async def stats_call(self) -> None:
        period = self.rng.choice(["today", "7d", "30d", "all"])
        zone = self.rng.choice(["UTC", "Europe/Berlin", "America/New_York"])
        arguments = {"workspaceId": self._workspace(), "period": period, "timeZone": zone}
        await self.call("get_execution_stats", arguments)

    async def session(self) -> None:
        mcp = self.rng.choice(self.mcps)
        headers = {"Authorization": f"Bearer {await self.tokens.current()}",
                   "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}  # fmt: skip
        hello = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                 "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                            "clientInfo": {"name": "soak", "version": "1"}}}  # fmt: skip
        opened = await self.send(mcp, json.dumps(hello).encode(), headers)
        session_id = _header(opened, "Mcp-Session-Id")
        if opened.status != 200 or session_id is None:
            return
        headers |= {"Mcp-Session-Id": session_id,
                    "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await self.send(mcp, json.dumps(note).encode(), headers)
        for method, params in (("tools/list", {}), ("ping", {}), ("tools/call", {
                "name": "get_many_workspaces", "arguments": {"limit": 1}})):  # fmt: skip
            message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            await self.send(self.rng.choice(self.mcps), json.dumps(message).encode(), headers)
        try:
            async with mcp.client.delete(mcp.url, headers=headers) as resp:
                await resp.read()
                self.stats.record(Reply(resp.status, dict(resp.headers), b""), 0.0)
        except (aiohttp.ClientError, TimeoutError) as err:
            self.stats.broken("connection error", err)


def _proc_figures(pid: int) -> tuple[int, int]:
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    return rss, fds


async def _held_slots(redis: aioredis.Redis, prefix: str) -> int:
    return await held_leases(redis, prefix)


async def _sample(
    replicas: Replicas, pool: asyncpg.Pool, redis: aioredis.Redis, started: float
) -> Sample:
    figures = [_proc_figures(p.pid) for p in replicas.procs]
    pg = await pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name = 'elova-mcp'"
    )
    held = await _held_slots(redis, replicas.env["ELOVA_REDIS_KEY_PREFIX"])
    return Sample(
        time.monotonic() - started, [f[0] for f in figures], [f[1] for f in figures], pg, held
    )


async def _inflight(session: aiohttp.ClientSession, port: int) -> float:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
        for line in (await resp.text()).splitlines():
            if line.startswith("elova_mcp_inflight_requests "):
                return float(line.split()[1])
    return -1.0


def _median(values: list[int]) -> float:
    return float(statistics.median(values)) if values else 0.0


def report(
    samples: list[Sample],
    stats: Stats,
    held_after: int,
    inflight: list[float],
    *,
    restarted: bool = False,
) -> bool:
    """Print the figures; whether the soak passed. Once replicas were `restarted`, the early
    and late samples of a replica are different processes: their growth is not checked."""
    third = max(1, len(samples) // 3)
    early, late = samples[:third], samples[-third:]
    ok = True
    print(f"\n{'t (s)':>7} {'RSS MiB r0/r1':>16} {'fds r0/r1':>11} {'pg conns':>9} {'slots':>6}")
    for s in samples:
        rss = "/".join(f"{r / 2**20:.1f}" for r in s.rss)
        fds = "/".join(str(f) for f in s.fds)
        print(f"{s.at:7.0f} {rss:>16} {fds:>11} {s.pg_connections:>9} {s.held_slots:>6}")
    for i in range(len(samples[0].rss)):
        rss_growth = _median([s.rss[i] for s in late]) - _median([s.rss[i] for s in early])
        fd_growth = _median([s.fds[i] for s in late]) - _median([s.fds[i] for s in early])
        print(f"replica {i}: RSS growth {rss_growth / 2**20:+.1f} MiB, fd growth {fd_growth:+.0f}"
              + (" (not checked: restarted)" if restarted else ""))  # fmt: skip
        ok &= restarted or (rss_growth <= RSS_GROWTH_BYTES and fd_growth <= FD_GROWTH)
    pg_growth = _median([s.pg_connections for s in late]) - _median(
        [s.pg_connections for s in early]
    )
    print(f"PostgreSQL connections growth {pg_growth:+.0f}")
    ok &= pg_growth <= PG_CONNECTION_GROWTH
    total = sum(stats.answers.values())
    lat = sorted(stats.latencies) or [0.0]
    p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    print(f"answers: {dict(stats.answers)} of {total}; success latency p50 {p50 * 1000:.1f} ms,"
          f" p99 {p99 * 1000:.1f} ms")  # fmt: skip
    print(f"held slots after the load: {held_after}; in-flight gauges: {inflight}")
    errors = {k: v for k, v in stats.answers.items() if k not in ("ok", "429")}
    ok &= not errors and held_after == 0 and all(v == 0 for v in inflight)
    for failure in stats.failures:
        print("  failure:", failure)
    print("SOAK PASSED" if ok else "SOAK FAILED")
    return ok


async def soak(minutes: float, clients: int, roll_every: float | None = None) -> bool:
    """The soak; with `roll_every`, three replicas behind HAProxy rolled that often."""
    db = await create_database("elova_soak")
    rolling = roll_every is not None
    count = 3 if rolling else 2
    env = {**LIMITS, "EXPECTED_REPLICAS": str(count)}
    front = free_port()
    if rolling:  # the token audience and allowed Host are the balancer's
        env["PUBLIC_URL"] = f"http://127.0.0.1:{front}"
    refresh_after = min(Tokens.REFRESH_AFTER, ROLLING_REFRESH_AFTER) if rolling else None
    replicas = Replicas(db.dsn, replicas=count, env=env, metrics=True)
    lb = OwnHAProxy(replicas.ports, port=front) if rolling else None
    pool = await asyncpg.create_pool(db.dsn, min_size=1, max_size=2)
    redis = aioredis.from_url(REDIS_URL)
    roller: Roller | None = None
    try:
        cfg = Config.from_env({**replicas.env, "ELOVA_PORT": str(replicas.ports[0])})
        world = await build_world(pool, TokenService(cfg))
        replicas.start()
        urls = [replicas.url(i) for i in range(count)]
        if lb is not None:
            lb.start()
            urls = [lb.url]
            roller = Roller(replicas, lb, roll_every or ROLL_EVERY_SECONDS)
        quiet = roller.quiet if roller is not None else asyncio.Lock()
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            mcps = [Mcp(session, url + "/mcp") for url in urls]
            stats, stop = Stats(), asyncio.Event()
            holders = [
                Tokens(session, urls[0], g, refresh_after or Tokens.REFRESH_AFTER)
                for g in world.approvals.values()
            ]
            runners = [
                asyncio.create_task(
                    Client(mcps, holders[i % len(holders)], world, stats, i).run(stop)
                )
                for i in range(clients)
            ]
            started = time.monotonic()
            samples: list[Sample] = []
            print(f"soak: {minutes:g} min, {clients} clients, replicas at {replicas.ports}"
                  + (f" behind HAProxy at {front}, one rolled every {roll_every:g} s"
                     if rolling else ""))  # fmt: skip
            if roller is not None:
                roller.start()
            while time.monotonic() - started < minutes * 60:
                await asyncio.sleep(SAMPLE_SECONDS)
                async with quiet:  # no replica is restarting
                    samples.append(await _sample(replicas, pool, redis, started))
                    exited = any(p.poll() is not None for p in replicas.procs)
                s = samples[-1]
                print(f"  {s.at:5.0f} s  answers {dict(stats.answers)}  slots {s.held_slots}",
                      flush=True)  # fmt: skip
                if exited:
                    print("a replica exited:\n" + replicas.output(0)[-3000:])
                    stop.set()
                    break
            if roller is not None:
                async with roller.quiet:
                    await roller.stop()
            stop.set()
            await asyncio.gather(*runners, return_exceptions=True)
            await asyncio.sleep(0.5)
            held_after = await _held_slots(redis, replicas.env["ELOVA_REDIS_KEY_PREFIX"])
            inflight = [await _inflight(session, p) for p in replicas.metrics_ports]
            print(f"token refreshes: {sum(h.refreshes for h in holders)}")
            for runner in runners:
                if runner.done() and runner.exception() is not None:
                    stats.broken("client crashed", runner.exception() or RuntimeError())
        rolled = roller.report() if roller is not None else True
        passed = report(samples, stats, held_after, inflight, restarted=roller is not None)
        return passed and rolled
    finally:
        if lb is not None:
            lb.stop()
        replicas.stop()
        await pool.close()
        await redis.aclose()
        await drop_database(db)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rolling", action="store_true", help="roll replicas behind HAProxy")
    parser.add_argument("--roll-every", type=float, default=ROLL_EVERY_SECONDS, metavar="S")
    args = parser.parse_args(argv)
    roll_every = args.roll_every if args.rolling else None
    return 0 if asyncio.run(soak(args.minutes, args.clients, roll_every)) else 1


if __name__ == "__main__":
    sys.exit(main())
