"""Rolling restarts under load: a steady mixed load through a balancer, and the roll of one
replica (SIGTERM, exit, start again on the same port) with its timeline.

    load = MixedLoad(session, lb.url, world)         # tests/hostile/world.py approvals
    tasks = load.start()
    timeline = await roll(replicas, 0, lb)            # readiness down ... UP again
    await load.stop(tasks)
    load.tally.failures()                             # {} when nothing failed

The load is what clients of a fleet do: 2026-07-28 stateless tool calls, 2025-11-25
sessions (initialize once, then tools/call with the same Mcp-Session-Id, whichever
replica answers), and OAuth refreshes (rotating: each uses the refresh token the last one
returned). An answer is a success only when it is what the same load gets with no restart;
429s are counted apart (the tests raise the limits so that none occurs).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from multidict import CIMultiDict

from tests.hostile.processes import Replicas
from tests.hostile.wire import modern_body, modern_headers
from tests.hostile.world import Granted, World
from tests.support.haproxy import OwnHAProxy

SESSION_ERA = "2025-11-25"
POLL_SECONDS = 0.05


@dataclass
class Tally:
    """Answers by kind of request and outcome ("ok", "429", or what went wrong)."""

    counts: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    examples: list[str] = field(default_factory=list)

    def record(self, kind: str, outcome: str, detail: str = "") -> None:
        self.counts[kind][outcome] += 1
        if outcome not in ("ok", "429") and len(self.examples) < 20:
            self.examples.append(f"{kind}: {outcome} {detail[:300]}")

    @property
    def total(self) -> int:
        return sum(sum(c.values()) for c in self.counts.values())

    def count(self, outcome: str) -> int:
        return sum(c[outcome] for c in self.counts.values())

    def failures(self) -> dict[str, dict[str, int]]:
        """Every outcome other than ok and 429, by kind."""
        failed = {
            kind: {o: n for o, n in c.items() if o not in ("ok", "429")}
            for kind, c in self.counts.items()
        }
        return {kind: f for kind, f in failed.items() if f}

    def summary(self) -> str:
        kinds = ", ".join(f"{k}: {dict(c)}" for k, c in sorted(self.counts.items()))
        return f"{self.total} requests ({kinds})"


def _tool_outcome(status: int, body: bytes) -> str:
    if status == 429:
        return "429"
    if status != 200:
        return str(status)
    try:
        document = json.loads(body)
    except ValueError:
        return "200 not JSON"
    result = document.get("result")
    if not isinstance(result, dict):
        return f"JSON-RPC error {document.get('error', {}).get('code')}"
    if result.get("isError"):
        return f"tool error {result.get('_meta', {}).get('code')}"
    return "ok"


class MixedLoad:
    """Workers calling through one base URL until stopped; every answer goes to `tally`."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        world: World,
        *,
        stateless: int = 4,
        sessions: int = 3,
        refresh_pause: float = 0.02,
    ) -> None:
        self.session, self.base_url, self.world = session, base_url, world
        self.mcp_url = base_url + "/mcp"
        self.stateless, self.sessions, self.refresh_pause = stateless, sessions, refresh_pause
        self.tally = Tally()
        self.stopping = asyncio.Event()
        # Account A's approval serves the tool calls, B's the sessions; a1 is refreshed
        # (rotation: one chain of refresh tokens, one worker).
        self.caller: Granted = world.approvals["a"]
        self.session_caller: Granted = world.approvals["b"]
        self.refreshed: Granted = world.approvals["a1"]

    def start(self) -> list[asyncio.Task[None]]:
        workers = [self._stateless(i) for i in range(self.stateless)]
        workers += [self._session(i) for i in range(self.sessions)]
        workers.append(self._refreshes())
        return [asyncio.create_task(w) for w in workers]

    async def stop(self, tasks: list[asyncio.Task[None]]) -> None:
        self.stopping.set()
        await asyncio.gather(*tasks)

    async def _post(
        self, kind: str, url: str, headers: dict[str, str], *, data: Any
    ) -> tuple[int, CIMultiDict[str], bytes] | None:
        try:
            async with self.session.post(url, data=data, headers=headers) as resp:
                # a copy that keeps header names case-insensitive: HAProxy lowercases them
                return resp.status, resp.headers.copy(), await resp.read()
        except (aiohttp.ClientError, TimeoutError) as err:
            self.tally.record(kind, f"connection error {type(err).__name__}", str(err))
            return None

    def _calls(self, worker: int) -> list[tuple[str, dict[str, Any]]]:
        ws = str(self.caller.workspaces[worker % len(self.caller.workspaces)])
        return [
            ("get_many_workspaces", {}),
            ("get_workspace", {"workspaceId": ws}),
            ("get_many_executions", {"workspaceId": ws, "limit": 2}),
        ]

    async def _stateless(self, worker: int) -> None:
        calls, n = self._calls(worker), 0
        while not self.stopping.is_set():
            tool, arguments = calls[n % len(calls)]
            n += 1
            body = modern_body("tools/call", {"name": tool, "arguments": arguments})
            headers = modern_headers(self.caller.token, "tools/call", tool)
            answer = await self._post("stateless tools/call", self.mcp_url, headers, data=body)
            if answer is not None:
                status, _, raw = answer
                self.tally.record("stateless tools/call", _tool_outcome(status, raw), raw.decode())

    async def _session(self, worker: int) -> None:
        headers = {
            "Authorization": f"Bearer {self.session_caller.token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        hello = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                 "params": {"protocolVersion": SESSION_ERA, "capabilities": {},
                            "clientInfo": {"name": "rolling", "version": "1"}}}  # fmt: skip
        session_id = None
        while session_id is None and not self.stopping.is_set():
            answer = await self._post("session initialize", self.mcp_url, headers,
                                      data=json.dumps(hello))  # fmt: skip
            if answer is None:
                continue
            status, answer_headers, raw = answer
            session_id = answer_headers.get("Mcp-Session-Id")
            ok = status == 200 and session_id is not None
            self.tally.record("session initialize", "ok" if ok else str(status), raw.decode())
        if session_id is None:
            return
        headers |= {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": SESSION_ERA}
        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
        answer = await self._post("session initialized", self.mcp_url, headers, data=note)
        if answer is not None:
            self.tally.record("session initialized", "ok" if answer[0] == 202 else str(answer[0]))
        ws = str(self.session_caller.workspaces[worker % len(self.session_caller.workspaces)])
        call_id = 0
        while not self.stopping.is_set():
            call_id += 1
            params = {"name": "get_workspace", "arguments": {"workspaceId": ws}}
            message = {"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": params}
            data = json.dumps(message)
            answer = await self._post("session tools/call", self.mcp_url, headers, data=data)
            if answer is not None:
                status, _, raw = answer
                outcome = _tool_outcome(status, raw)
                if status == 404:
                    outcome = "404 for a live session"
                self.tally.record("session tools/call", outcome, raw.decode())

    async def _refreshes(self) -> None:
        refresh_token = self.refreshed.refresh_token
        while not self.stopping.is_set():
            form = {"grant_type": "refresh_token", "refresh_token": refresh_token,
                    "client_id": self.refreshed.approval.client_id}  # fmt: skip
            answer = await self._post("oauth refresh", self.base_url + "/token", {}, data=form)
            if answer is None:
                return  # whether it rotated is unknown: the chain cannot go on
            status, _, raw = answer
            if status != 200:
                self.tally.record("oauth refresh", str(status), raw.decode())
                return
            refresh_token = json.loads(raw)["refresh_token"]
            self.tally.record("oauth refresh", "ok")
            await asyncio.sleep(self.refresh_pause)


@dataclass
class Timeline:
    """Seconds after SIGTERM of each step of one replica's restart (`lines` shows them to
    the hundredth; the values themselves are not rounded, so the order checks compare what
    was measured: a restart within the millisecond of the exit once rounded to a tie)."""

    replica: int
    readiness_down: float = -1.0
    marked_down: float = -1.0
    listener_closed: float = -1.0
    exited: float = -1.0
    started: float = -1.0
    ready: float = -1.0
    marked_up: float = -1.0
    exit_code: int | None = None

    def lines(self) -> list[str]:
        steps = [
            ("SIGTERM", 0.0),
            ("/readyz 503 (draining)", self.readiness_down),
            ("HAProxy marks it DOWN", self.marked_down),
            ("listener closed (connection refused)", self.listener_closed),
            (f"process exited (status {self.exit_code})", self.exited),
            ("started again, same port", self.started),
            ("/readyz 200", self.ready),
            ("HAProxy marks it UP", self.marked_up),
        ]
        return [f"  {at:6.2f} s  {step}" for step, at in steps]


async def _readyz(session: aiohttp.ClientSession, url: str) -> int | None:
    """The status of /readyz on a new connection, None when the connection is refused."""
    try:
        async with session.get(url + "/readyz", headers={"Connection": "close"}) as resp:
            await resp.read()
            return resp.status
    except (aiohttp.ClientError, TimeoutError):
        return None


async def roll(replicas: Replicas, i: int, lb: OwnHAProxy, *, timeout: float = 60.0) -> Timeline:
    """SIGTERM replica `i`, watch it drain and exit, start it again on the same port and
    return once HAProxy has marked it UP."""
    timeline = Timeline(i)
    server = f"mcp-{i + 1}"
    url = replicas.url(i)
    probe_timeout = aiohttp.ClientTimeout(total=2)
    async with aiohttp.ClientSession(timeout=probe_timeout) as probe:
        sent = time.monotonic()
        replicas.signal(i, signal.SIGTERM)

        def since() -> float:  # unrounded: two steps a few microseconds apart stay ordered
            return time.monotonic() - sent

        proc = replicas.procs[i]
        deadline = sent + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            status = await _readyz(probe, url)
            if status == 503 and timeline.readiness_down < 0:
                timeline.readiness_down = since()
            if status is None and timeline.listener_closed < 0:
                timeline.listener_closed = since()
            await asyncio.sleep(POLL_SECONDS)
        left = max(0.1, deadline - time.monotonic())
        timeline.exit_code = await asyncio.to_thread(proc.wait, left)
        timeline.exited = since()
        if timeline.listener_closed < 0:
            timeline.listener_closed = timeline.exited
        down_at = await asyncio.to_thread(lb.wait_state, server, "DOWN", after=sent, timeout=5.0)
        timeline.marked_down = down_at - sent
        replicas.restart(i)
        timeline.started = since()
        while await _readyz(probe, url) != 200:
            if replicas.procs[i].poll() is not None:
                raise RuntimeError(f"replica {i} exited on start:\n{replicas.output(i)[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"replica {i} not ready after {timeout} s")
            await asyncio.sleep(POLL_SECONDS)
        timeline.ready = since()
        left = max(0.1, deadline - time.monotonic())
        up_at = await asyncio.to_thread(lb.wait_state, server, "UP", after=sent, timeout=left)
        timeline.marked_up = up_at - sent
    return timeline
