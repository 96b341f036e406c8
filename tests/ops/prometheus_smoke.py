"""Prometheus smoke run (not part of `make test`): a real Prometheus scrapes a running service
under a short load; every dashboard query must return data; the main panels go to a PNG.

    .venv/bin/python -m tests.ops.prometheus_smoke [--seconds 60] [--png out.png]

Needs PostgreSQL and Redis (as the tests do), Debian's `prometheus` and `make tools`.
Exit status 0 when every query returned data.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from service.app import create_app
from service.app_keys import METRICS
from service.config import Config
from tests.mcp.conftest import Wire, approve
from tests.ops import dashboard as dash
from tests.ops.tooling import ROOT, TOOLS_BIN
from tests.support.keys import ed25519_pem
from tests.support.server import free_port
from tests.support.services import REDIS_URL, create_database, drop_database, new_redis_prefix

NO_SUCH = "00000000-0000-4000-8000-00000000000"  # + a digit: ids that exist nowhere (NOT_FOUND)
TOOL_CALLS = [
    ("get_many_workspaces", {}),
    ("get_workspace", {"workspaceId": "WS"}),
    ("get_many_instances", {"workspaceId": "WS"}),
    ("get_execution_stats", {"workspaceId": "WS", "period": "7d", "timeZone": "UTC"}),
    ("get_many_executions", {"workspaceId": "WS"}),
    ("get_many_workflows", {"workspaceId": "WS"}),
    ("get_many_sync_jobs", {"workspaceId": "WS", "instanceId": NO_SUCH + "1"}),
    ("get_workspace", {"workspaceId": "not-a-uuid"}),  # VALIDATION_ERROR
    ("get_workflow", {"workspaceId": "WS", "workflowId": NO_SUCH + "2"}),
    ("get_execution", {"workspaceId": "WS", "executionId": NO_SUCH + "0"}),
]


def prometheus_config(metrics_port: int, rules: Path) -> str:
    return json.dumps(
        {
            "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
            "rule_files": [str(rules)],
            "scrape_configs": [
                {
                    "job_name": "elova-mcp",
                    "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
                }
            ],
        }
    )


async def load(wires: list[Wire], bad: Wire, seconds: float) -> dict[str, int]:
    """Concurrent tool calls from two accounts (3 at a time each: some 429s by design)."""
    counts: dict[str, int] = {}
    deadline = time.monotonic() + seconds

    async def worker(wire: Wire) -> None:
        while time.monotonic() < deadline:
            name, args = random.choice(TOOL_CALLS)
            args = {k: (str(wire.workspace_id) if v == "WS" else v) for k, v in args.items()}
            resp = await wire.modern("tools/call", {"name": name, "arguments": args})
            await resp.read()
            counts[str(resp.status)] = counts.get(str(resp.status), 0) + 1
            await asyncio.sleep(random.uniform(0.05, 0.25))

    async def intruder() -> None:
        while time.monotonic() < deadline:
            await (await bad.modern("tools/list")).read()
            await asyncio.sleep(0.5)

    await asyncio.gather(*(worker(w) for w in wires for _ in range(3)), intruder())
    return counts


async def query(session: aiohttp.ClientSession, base: str, expr: str) -> list[Any]:
    async with session.get(f"{base}/api/v1/query", params={"query": expr}) as resp:
        body = await resp.json()
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    result: list[Any] = body["data"]["result"]
    return result


async def query_range(
    session: aiohttp.ClientSession, base: str, expr: str, start: float, end: float
) -> list[Any]:
    params = {"query": expr, "start": str(start), "end": str(end), "step": "2"}
    async with session.get(f"{base}/api/v1/query_range", params=params) as resp:
        body = await resp.json()
    result: list[Any] = body["data"]["result"] if body.get("status") == "success" else []
    return result


async def run(seconds: float, png: Path) -> int:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print("prometheus is not installed (apt-get install prometheus)", file=sys.stderr)
        return 2
    database = await create_database("elova_smoke")
    work = Path(tempfile.mkdtemp(prefix="elova-smoke-"))
    metrics_port, prom_port = free_port(), free_port()
    cfg = Config.from_env(
        {
            "ELOVA_DATABASE_URL": database.dsn,
            "ELOVA_REDIS_URL": REDIS_URL,
            "ELOVA_REDIS_KEY_PREFIX": new_redis_prefix(),
            "ELOVA_SIGNING_KEY": ed25519_pem().decode(),
            "ELOVA_METRICS_PORT": str(metrics_port),
            "ELOVA_LIMIT_GLOBAL_CONCURRENCY": "5",
            "ELOVA_LIMIT_APPROVAL_PER_MINUTE": "1200",
        }
    )
    app: web.Application = create_app(cfg)
    client: TestClient[web.Request, web.Application] = TestClient(TestServer(app))
    (work / "prometheus.yml").write_text(
        prometheus_config(metrics_port, ROOT / "grafana/alerts/elova-mcp.rules.yaml")
    )
    prom = subprocess.Popen(
        [prometheus, f"--config.file={work / 'prometheus.yml'}",
         f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=(work / "prometheus.log").open("wb"),
    )  # fmt: skip
    base = f"http://127.0.0.1:{prom_port}"
    try:
        await client.start_server()
        assert app[METRICS].listen_port == metrics_port
        wires = []
        for _ in range(2):
            granted = await approve(app)
            wire = Wire(client, granted["token"])
            wire.workspace_id = granted["workspace_id"]
            wires.append(wire)
        bad = Wire(client, "not-a-token")
        started = time.time()
        counts = await load(wires, bad, seconds)
        print(f"load: {seconds:.0f} s, HTTP statuses {counts}")
        await asyncio.sleep(8)  # two more scrapes and rule evaluations
        ended = time.time()
        failures = 0
        panels: list[dict[str, Any]] = []
        async with aiohttp.ClientSession() as session:
            for q in dash.queries():
                result = await query(session, base, q.expr)
                ok = bool(result)
                failures += not ok
                print(f"{'ok  ' if ok else 'NONE'} {q.panel}: {q.legend or q.expr[:60]}")
                series = await query_range(session, base, q.expr, started - 10, ended)
                panels.append({"panel": q.panel, "legend": q.legend, "series": series})
        data = work / "panels.json"
        data.write_text(json.dumps({"panels": panels, "start": started}))
        png.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [str(TOOLS_BIN / "python"), str(Path(__file__).with_name("render_panels.py")),
             str(data), str(png)],
            check=True,
        )  # fmt: skip
        print(f"{len(panels) - failures}/{len(panels)} dashboard queries returned data; {png}")
        return 1 if failures else 0
    finally:
        await client.close()
        prom.terminate()
        prom.wait(timeout=20)
        await drop_database(database)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--png", type=Path, default=ROOT / "tests/artifacts/dashboard.png")
    args = parser.parse_args()
    return asyncio.run(run(args.seconds, args.png))


if __name__ == "__main__":
    sys.exit(main())
