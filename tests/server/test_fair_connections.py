"""No one address takes a replica's connections (issue 54, finding 1), against a real
`elova-mcp serve` with the default settings: while one address (127.0.0.2) holds 1,000
stalled uploads, reopening each as it is cut, another address's tool calls are answered
and the probes the manifests use (on the metrics listener) answer 200 every time; behind
the shipped HAProxy config a stalled upload never reaches a replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest

from tests.mcp.conftest import approve
from tests.server.test_request_edge import MCP_HEAD, serve, tool_call
from tests.support.haproxy import OwnHAProxy, haproxy_command
from tests.support.serve_process import ServeProcess
from tests.support.served_app import StartApp, value

__all__ = ["serve"]  # the fixture, shared with test_request_edge

ATTACKER = "127.0.0.2"  # loopback answers all of 127/8
STALLED = 1000  # ELOVA_MAX_CONNECTIONS's default
SECONDS = 25.0  # past the body deadline (10 s): every stalled upload is cut and reopened
# A body declared and never completed: the head is in, the body deadline runs.
STALL = MCP_HEAD + b"Content-Length: 200\r\n\r\n" + b'{"jsonrpc":"2.0","id":1,'


@contextlib.asynccontextmanager
async def stalled_uploads(port: int, count: int) -> AsyncIterator[Counter[str]]:
    """`count` connections from ATTACKER that each send a head and part of a declared body,
    then nothing; each reopened as soon as the server closes it. Counts the connections
    opened and how they ended."""
    seen: Counter[str] = Counter()
    stop = asyncio.Event()

    async def hold() -> None:
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, local_addr=(ATTACKER, 0)
                )
            except OSError:
                seen["connect_failed"] += 1
                await asyncio.sleep(0.1)
                continue
            seen["opened"] += 1
            try:
                writer.write(STALL)
                await writer.drain()
                answer = await reader.read(64)
                seen[answer[:12].decode(errors="replace") or "closed"] += 1
            except OSError:
                seen["reset"] += 1
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

    tasks = [asyncio.create_task(hold()) for _ in range(count)]
    try:
        yield seen
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def fresh_get(url: str) -> int:
    """GET on a new connection (as a kubelet probes), 2 s to answer (the manifests'
    timeoutSeconds); 0 when it did not answer."""
    try:
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
            session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp,
        ):
            await resp.read()
            return resp.status
    except (aiohttp.ClientError, TimeoutError):
        return 0


@pytest.mark.slow
@pytest.mark.timeout(150)
async def test_one_address_with_a_thousand_stalled_uploads_locks_out_nobody(
    start_app: StartApp, serve: Callable[..., ServeProcess]
) -> None:
    async with serve() as proc:
        granted = await approve((await start_app(PUBLIC_URL=proc.base)).app)
        body, headers = tool_call(granted["token"], granted["workspace_id"])
        calls: Counter[int] = Counter()
        probes: Counter[tuple[str, int]] = Counter()
        main_probes: Counter[tuple[str, int]] = Counter()

        async def call() -> None:  # a new connection a call: each must be admitted
            connector = aiohttp.TCPConnector(force_close=True)
            async with aiohttp.ClientSession(connector=connector) as session:
                try:
                    async with session.post(
                        f"{proc.base}/mcp", data=body, headers=headers,
                        timeout=aiohttp.ClientTimeout(total=10),
                    ) as resp:  # fmt: skip
                        answer = await resp.read()
                        calls[resp.status] += 1
                        if b"too many open connections" in answer:
                            calls[-1] += 1  # refused at the connection cap
                except (aiohttp.ClientError, TimeoutError):
                    calls[0] += 1

        async def legit() -> None:
            # One call every 0.5 s: under the approval's 60 a minute.
            deadline = time.monotonic() + SECONDS
            while time.monotonic() < deadline:
                await asyncio.gather(call(), asyncio.sleep(0.5))

        async def probe() -> None:
            deadline = time.monotonic() + SECONDS
            while time.monotonic() < deadline:
                for path in ("/livez", "/readyz"):
                    metrics_base = f"http://127.0.0.1:{proc.metrics_port}"
                    probes[path, await fresh_get(metrics_base + path)] += 1
                    main_probes[path, await fresh_get(proc.base + path)] += 1
                await asyncio.sleep(0.5)

        async with stalled_uploads(proc.port, STALLED) as attack:
            await asyncio.sleep(3)  # the stalled uploads hold the cap
            metrics = await proc.scrape()
            assert (value(metrics, "elova_mcp_open_connections") or 0) >= 900, attack
            await asyncio.gather(legit(), probe())
            metrics = await proc.scrape()
        cuts = {
            reason: value(metrics, "elova_mcp_connection_cuts_total", reason=reason)
            for reason in ("stalled_evicted", "share_evicted", "idle_evicted", "refused",
                           "body_timeout")
        }  # fmt: skip
        cuts["shed_loop_lag"] = value(metrics, "elova_mcp_shed_requests_total", reason="loop_lag")
    report = f"calls {dict(calls)}, metrics probes {dict(probes)}, main-listener probes "
    report += f"{dict(main_probes)}, attack {dict(attack)}, cuts {cuts}"
    print(report)  # the measurement, for the report
    total = sum(calls.values())
    assert total >= 40, report
    assert calls[200] >= 0.9 * total, report
    # Never the connection cap's 503 (a loop lagging on a shared machine may shed one).
    assert calls[-1] == 0, report
    assert all(status == 200 for (_, status) in probes), report
    assert sum(probes.values()) >= 40, report
    assert attack["opened"] >= STALLED + 500, report  # they were cut and reopened


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_the_shipped_haproxy_holds_stalled_uploads_itself(
    serve: Callable[..., ServeProcess],
) -> None:
    if haproxy_command() is None:
        if os.environ.get("CI"):
            pytest.fail("haproxy is required in CI (.ci/debian-packages.txt)")
        pytest.skip("haproxy is not installed")
    async with serve(TRUSTED_PROXIES="127.0.0.0/8") as proc:
        with OwnHAProxy([proc.port]) as lb:
            await asyncio.sleep(1)  # a server starts UP; its checks run
            async with stalled_uploads(lb.port, 50) as attack:
                await asyncio.sleep(2)
                metrics = await proc.scrape()
                status = await fresh_get(f"{lb.url}/livez")
            held = value(metrics, "elova_mcp_open_connections") or 0
    # HAProxy's health checks and reused connections only: the stalled bodies stay there.
    assert held < 10, (held, dict(attack))
    assert attack["opened"] >= 50 and status == 200, dict(attack)
