"""Metrics as Prometheus sees them: a real scrape of the separate listener of a real app."""

from __future__ import annotations

import asyncio

import aiohttp
import prometheus_client
from prometheus_client.parser import text_string_to_metric_families

from service.app_keys import DB_POOL, METRICS
from service.observability.metrics import app_metrics as m
from service.observability.metrics import labels, updates
from tests.ops.tooling import require, run
from tests.support.served_app import StartApp, samples, scrape, value


async def test_scrape_is_served_on_its_own_listener_only(start_app: StartApp) -> None:
    client = await start_app(LIMIT_GLOBAL_CONCURRENCY="7", DB_POOL_MAX="6")
    for _ in range(3):
        assert (await client.get("/readyz")).status == 200
    text = await scrape(client)

    assert value(text, "elova_mcp_build_info", version="0.3.0", python_version=_python()) == 1
    assert value(text, "elova_mcp_limit_concurrency_requests", limit="global") == 7
    assert value(text, "elova_mcp_limit_concurrency_requests", limit="account") == 2
    assert value(text, "elova_mcp_limit_rate_requests_per_second", limit="approval") == 1
    assert value(text, "elova_mcp_limit_request_deadline_seconds") == 30
    assert value(text, "elova_mcp_db_pool_max_connections") == 6
    assert value(text, "elova_mcp_inflight_requests") == 0
    assert value(text, "elova_mcp_draining") == 0
    ok_readyz = {"route": "/readyz", "method": "GET", "status": "200"}
    assert value(text, "elova_mcp_http_requests_total", **ok_readyz) == 3
    assert value(text, "elova_mcp_db_call_duration_seconds_count", operation="health") == 3
    assert value(text, "elova_mcp_redis_call_duration_seconds_count", operation="health") == 3
    assert value(text, "elova_mcp_limit_refusals_total", limit="approval") == 0
    assert value(text, "process_resident_memory_bytes")
    # The main listener does not expose metrics.
    assert (await client.get("/metrics")).status == 404


async def test_pool_connections_are_read_at_scrape_time(start_app: StartApp) -> None:
    client = await start_app(DB_POOL_MIN="1", DB_POOL_MAX="4")
    pool = client.app[DB_POOL]
    async with pool.acquire():
        text = await scrape(client)
        assert value(text, "elova_mcp_db_pool_connections", state="in_use") == 1
    text = await scrape(client)
    assert value(text, "elova_mcp_db_pool_connections", state="in_use") == 0
    assert value(text, "elova_mcp_db_pool_connections", state="idle") == pool.get_size()
    assert value(text, "elova_mcp_db_pool_min_connections") == 1


async def test_no_listener_without_a_metrics_port(start_app: StartApp) -> None:
    client = await start_app(METRICS_PORT=None)
    assert client.app[METRICS].listen_port is None
    # The metrics are still recorded: the listener is only how they are read.
    await client.get("/livez")
    assert b'route="/livez"' in client.app[METRICS].exposition()


async def test_metrics_listener_stops_with_the_app(start_app: StartApp) -> None:
    client = await start_app()
    port = client.app[METRICS].listen_port
    await client.close()
    async with aiohttp.ClientSession() as session:
        try:
            await session.get(f"http://127.0.0.1:{port}/metrics")
        except aiohttp.ClientConnectionError:
            return
    raise AssertionError("the metrics listener still answers after the app stopped")


def test_label_values_outside_the_fixed_sets_become_other() -> None:
    metrics = m.Metrics()
    user = "alice@example.com"
    metrics.observe_rpc("tools/call", "get_workspace", "tool_error:NOT_FOUND", 0.01, 300)
    metrics.observe_rpc("tools/call", user, "tool_error:" + user, 0.01, 300)
    metrics.observe_rpc(user, None, user, 0.2, 10)
    metrics.limit_refused(user)
    metrics.auth_failed("token eyJhbGciOi")
    metrics.token_issued(user)
    metrics.db_call("SELECT * FROM accounts WHERE email = 'alice@example.com'", 0.1, True)
    metrics.redis_call(user, 0.1, True)
    metrics.observe_http("/oauth/" + user, "BREW", 418, 0.1)
    text = metrics.exposition().decode()

    assert user not in text and "eyJ" not in text and "SELECT" not in text
    found = samples(text)
    assert found[_key("elova_mcp_requests_total", "tools/call", "get_workspace", "tool_error",
                      "NOT_FOUND")] == 1  # fmt: skip
    assert found[_key("elova_mcp_requests_total", "tools/call", "other", "tool_error", "other")]
    assert found[_key("elova_mcp_requests_total", "other", "none", "other", "none")] == 1
    assert value(text, "elova_mcp_limit_refusals_total", limit="other") == 1
    assert value(text, "elova_mcp_auth_failures_total", reason="other") == 1
    assert value(text, "elova_mcp_tokens_issued_total", grant="other") == 1
    assert value(text, "elova_mcp_db_call_errors_total", operation="other") == 1
    assert value(text, "elova_mcp_redis_call_errors_total", operation="other") == 1
    assert value(text, "elova_mcp_http_requests_total", route="other", method="other",
                 status="4xx") == 1  # fmt: skip


def test_every_label_value_is_from_a_fixed_set() -> None:
    allowed = {
        "method": labels.METHODS | {"other", "none"},
        "tool": labels.TOOLS | {"other", "none"},
        "outcome": labels.OUTCOMES | {"other"},
        "error_code": labels.TOOL_ERROR_CODES | {"other", "none"},
        "limit": set(labels.LIMITS) | {"other"},
        "grant": set(labels.GRANTS) | {"other"},
        "state": {"idle", "in_use"},
        "kind": set(labels.CLIENT_KINDS) | {"other"},
    }
    reasons = {  # `reason` means something else on each family that has it
        "elova_mcp_auth_failures": set(labels.AUTH_REASONS),
        "elova_mcp_shed_requests": set(labels.SHED_REASONS),
        "elova_mcp_connection_cuts": set(labels.CONNECTION_CUTS),
        "elova_mcp_registration_refusals": set(labels.REGISTRATION_REFUSALS),
    }
    metrics = m.Metrics()
    for outcome in ("ok", "tool_error:VALIDATION_ERROR", "limited", "auth_error", "x"):
        metrics.observe_rpc("tools/call", "get_many_executions", outcome, 0.3, 70000)
    metrics.request_shed("x")
    metrics.connection_cut("x")
    metrics.registration_refused("x")
    metrics.unused_clients_removed("x", 1)
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            for label, label_value in sample.labels.items():
                if label == "reason":
                    family_name = sample.name.removesuffix("_total").removesuffix("_created")
                    expected = reasons[family_name] | {"other"}
                    assert label_value in expected, (sample.name, label, label_value)
                elif label in allowed:
                    assert label_value in allowed[label], (sample.name, label, label_value)


def test_each_app_has_its_own_registry() -> None:
    first, second = m.Metrics(), m.Metrics()
    first.limit_refused("global")
    assert value(second.exposition().decode(), "elova_mcp_limit_refusals_total",
                 limit="global") == 0  # fmt: skip
    global_names = {f.name for f in prometheus_client.REGISTRY.collect()}
    assert not any(name.startswith("elova_mcp") for name in global_names)


def test_tool_label_set_is_the_catalog() -> None:
    import json
    from pathlib import Path

    import service

    catalog = json.loads(
        (Path(service.__file__).parent / "contract" / "elova-tools.json").read_text()
    )
    assert {tool["name"] for tool in catalog["tools"]} == labels.TOOLS


def test_slo_threshold_is_a_bucket_bound() -> None:
    assert 0.25 in labels.LATENCY_BUCKETS


async def test_promtool_accepts_a_real_scrape(start_app: StartApp) -> None:
    promtool = require("promtool")
    client = await start_app()
    await client.get("/livez")
    await client.get("/readyz")
    await client.get("/nowhere")
    metrics = client.app[METRICS]
    metrics.observe_rpc("tools/call", "get_workspace", "ok", 0.02, 900)
    metrics.request_started()
    metrics.request_finished()
    await asyncio.sleep(labels.LOOP_PROBE_SECONDS + 0.1)  # one loop-lag observation
    text = await scrape(client)
    output = run([promtool, "check", "metrics"], input=text)
    assert "error" not in output.lower(), output


def _key(
    name: str, method: str, tool: str, outcome: str, code: str
) -> tuple[str, tuple[tuple[str, str], ...]]:
    labels = {"method": method, "tool": tool, "outcome": outcome, "error_code": code}
    return (name, tuple(sorted(labels.items())))


def _python() -> str:
    import platform

    return platform.python_version()


def test_per_request_fast_paths_expose_what_prometheus_client_would() -> None:
    """`count`, `observe` and `shift` read prometheus-client's fields: a new version that
    moved them fails here, not on a scrape."""
    amounts = [0.0, 0.0004, 0.001, 0.0025, 0.07, 3.0, 10.0, 1e9, float("inf"), float("nan")]
    expositions = []
    for fast in (False, True):
        registry = prometheus_client.CollectorRegistry()
        histogram = prometheus_client.Histogram(
            "h", "h", ["a"], registry=registry, buckets=(0.001, 0.0025, 0.05, 10.0)
        )
        counter = prometheus_client.Counter("c", "c", ["a"], registry=registry)
        gauge = prometheus_client.Gauge("g", "g", registry=registry)
        child, counted = histogram.labels("x"), counter.labels("x")
        for step, amount in enumerate(amounts):
            if fast:
                updates.observe(child, amount)
                updates.count(counted)
                updates.shift(gauge, 1 if step % 3 else -1)
            else:
                child.observe(amount)
                counted.inc()
                if step % 3:
                    gauge.inc()
                else:
                    gauge.dec()
        expositions.append(prometheus_client.generate_latest(registry).decode())
    strip = [
        "\n".join(line for line in text.splitlines() if "_created" not in line)
        for text in expositions
    ]
    assert strip[0] == strip[1]
