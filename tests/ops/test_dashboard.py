"""The Grafana dashboard: every query parses, and every metric it reads is exported by a
running instance of the service (or is a recording rule of ours, or Prometheus' own `up`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from service.observability.metrics.labels import LOOP_PROBE_SECONDS
from tests.mcp.conftest import Wire, approve
from tests.ops import dashboard as dash
from tests.ops.tooling import ROOT, require, run
from tests.ops.yamldocs import load_file
from tests.support.served_app import StartApp, scrape

RULES = ROOT / "grafana" / "alerts" / "elova-mcp.rules.yaml"


def test_dashboard_covers_what_on_call_needs() -> None:
    board = dash.load()
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert [r.split(" (")[0] for r in rows] == [
        "Service level",
        "Traffic and errors",
        "Latency",
        "Limits and auth",
        "Dependencies",
        "Saturation",
        "Floods and slow clients",
    ]
    exprs = " ".join(q.expr for q in dash.queries(board))
    for needle in (
        "histogram_quantile(0.99",
        "sum by (tool)",
        "elova_mcp_limit_refusals_total",
        "elova_mcp_auth_failures_total",
        "elova_mcp_db_call_duration_seconds_bucket",
        "elova_mcp_redis_call_duration_seconds_bucket",
        "elova_mcp_db_pool_connections",
        "elova_mcp_event_loop_lag_seconds_bucket",
        "elova:mcp_availability_errors:ratio_rate1h",
        "elova:mcp_latency_slow:ratio_rate1h",
        "elova_mcp_shed_requests_total",
        "elova_mcp_admitted_requests_total",
        "elova_mcp_inflight_limit",
        "elova_mcp_inflight_limit_baseline_seconds",
        "elova_mcp_paced_refusals_total",
        "elova_mcp_connection_cuts_total",
        "elova_mcp_open_connections",
    ):
        assert needle in exprs, needle
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    assert all(p["datasource"]["uid"] == "${datasource}" for p in board["panels"] if "targets" in p)


def test_every_panel_query_parses(tmp_path: Path) -> None:
    promtool = require("promtool")
    rules = [
        {"record": f"dashboard:query_{i}", "expr": query.expr}
        for i, query in enumerate(dash.queries())
    ]
    path = tmp_path / "dashboard-queries.json"  # promtool reads YAML, and JSON is YAML
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    output = run([promtool, "check", "rules", str(path)])
    assert f"SUCCESS: {len(rules)} rules found" in output


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (tool) (rate(a_total{job=~"x",tool=~".*"}[1m]))', {"a_total"}),
        ("1 - max(elova:x:ratio_rate1h) / 0.001", {"elova:x:ratio_rate1h"}),
        ("histogram_quantile(0.99, sum by (le) (rate(b_bucket[5m]))) or up", {"b_bucket", "up"}),
    ],
)
def test_metric_names_are_read_from_queries(expr: str, names: set[str]) -> None:
    assert dash.metric_names(expr) == names


async def test_every_dashboard_metric_is_exported_by_a_running_service(
    start_app: StartApp,
) -> None:
    client = await start_app()
    wire = Wire(client, (await approve(client.app))["token"])
    await wire.modern("tools/list")
    await wire.modern("tools/call", {"name": "get_many_workspaces", "arguments": {}})
    await wire.modern("tools/call", {"name": "get_workspace", "arguments": {"limit": 0}})
    await client.get("/readyz")
    await asyncio.sleep(LOOP_PROBE_SECONDS + 0.1)
    text = await scrape(client)
    exported = {
        line.split("{")[0].split(" ")[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    rules = [rule for group in load_file(RULES)["groups"] for rule in group["rules"]]
    recorded = {rule["record"] for rule in rules if "record" in rule}
    needed = set(dash.variable_metrics())
    # The recording and alerting rules read the service's metrics too.
    for expr in [query.expr for query in dash.queries()] + [rule["expr"] for rule in rules]:
        needed |= dash.metric_names(expr)
    missing = sorted(
        name
        for name in needed
        if name not in exported and name not in recorded and name not in dash.PROMETHEUS_SERIES
    )
    assert not missing, f"dashboard or rules read metrics the service does not export: {missing}"
    assert any(name.startswith("elova:") for name in needed)
