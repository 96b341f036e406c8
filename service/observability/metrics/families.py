"""Every metric family this service exports, in one app's own registry.

`Families` builds the registry and the families (names, help texts, label names, buckets)
from the vocabulary of labels.py, and creates the zero-valued series that alerts and rates
read. app_metrics.py puts the interface the rest of the service calls on top of it.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from importlib import metadata

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
)

from service.observability.metrics.labels import (
    AUTH_REASONS,
    CLIENT_KINDS,
    CONNECTION_CUTS,
    DEPENDENCY_BUCKETS,
    GRANTS,
    LATENCY_BUCKETS,
    LIMITS,
    LOOP_LAG_BUCKETS,
    NONE,
    OPERATION_BUCKETS,
    OPERATION_METRIC,
    PREFIX,
    REDIS_OPERATIONS,
    REGISTRATION_REFUSALS,
    SHED_REASONS,
    SIZE_BUCKETS,
    SLOT_WAIT_BUCKETS,
    TOOLS,
)


class OverloadMetrics:
    """The families of the in-flight limit of load shedding: the limit, what it is computed
    from (the latency of admitted requests, the baseline) and its decisions. The gauges are
    read from the app's `Overload` when Prometheus scrapes (service/server/overload/metrics.py
    binds them); a request admitted on a shed route costs one counter increment. The shed
    requests themselves are counted by `shed_requests_total{reason}`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"{PREFIX}_{name}", doc, registry=registry)

        self.limit = gauge(
            "inflight_limit",
            "Requests this replica lets in flight on /mcp and the OAuth endpoints before it "
            "sheds (adaptive, or the fixed cap).",
        )
        self.inflight = gauge(
            "inflight_limit_requests",
            "Requests in flight on /mcp and the OAuth endpoints: what the in-flight limit counts.",
        )
        self.latency = gauge(
            "inflight_limit_latency_seconds",
            "90th percentile latency of the admitted requests of the adaptive limit's last "
            "window (NaN until measured, and under the fixed cap).",
        )
        self.baseline = gauge(
            "inflight_limit_baseline_seconds",
            "The adaptive limit's baseline: the 90th percentile latency at low concurrency "
            "(NaN until measured, and under the fixed cap).",
        )
        self.adaptive = gauge("inflight_limit_adaptive", "1 when the in-flight limit adapts.")
        self.admitted = Counter(
            f"{PREFIX}_admitted_requests_total",
            "Requests on /mcp and the OAuth endpoints that load shedding let in.",
            registry=registry,
        )


class Families:
    """Every metric of one app, in its own registry (never the process-global one)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        reg = self.registry

        # Every metric is named `elova_mcp_<name>` and lives in this app's registry only.
        def counter(name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
            return Counter(f"{PREFIX}_{name}", doc, labels, registry=reg)

        def gauge(name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
            return Gauge(f"{PREFIX}_{name}", doc, labels, registry=reg)

        def histogram(
            name: str, doc: str, buckets: Sequence[float], labels: Sequence[str] = ()
        ) -> Histogram:
            return Histogram(f"{PREFIX}_{name}", doc, labels, buckets=buckets, registry=reg)

        self.requests = counter(
            "requests_total",
            "JSON-RPC requests answered, by MCP method, tool, outcome and tool error code.",
            ("method", "tool", "outcome", "error_code"),
        )
        self.latency = histogram(
            "request_duration_seconds",
            "Time from receiving a JSON-RPC request to its answer, by MCP method and tool.",
            LATENCY_BUCKETS,
            ("method", "tool"),
        )
        self.operation = Histogram(
            OPERATION_METRIC,
            "MCP request duration as observed on the server, from receiving it to its answer.",
            ("mcp_method_name", "gen_ai_tool_name", "error_type"),
            buckets=OPERATION_BUCKETS,
            registry=reg,
        )
        self.response_size = histogram(
            "response_size_bytes",
            "Size of JSON-RPC answers in bytes, by MCP method and tool.",
            SIZE_BUCKETS,
            ("method", "tool"),
        )
        self.refusals = counter(
            "limit_refusals_total",
            "Requests refused with HTTP 429, by the limit that refused them.",
            ("limit",),
        )
        self.slot_waits = histogram(
            "limit_slot_wait_seconds",
            "Time requests over a concurrency cap waited for a slot, by outcome (admitted after"
            " the wait, or refused with 429 when it ended).",
            SLOT_WAIT_BUCKETS,
            ("outcome",),
        )
        self.replica_capacity = gauge(
            "limit_replica_capacity_requests",
            "Requests this replica may hold at once now: the global cap, or its leased block"
            " of the fleet-wide cap when one is set.",
        )
        self.inflight = gauge(
            "inflight_requests",
            "Requests whose method runs here (admitted, or overlapping their admission).",
        )
        self.concurrency_limit = gauge(
            "limit_concurrency_requests",
            "Configured concurrency caps: global (per replica) and per account (all replicas).",
            ("limit",),
        )
        self.rate_limit = gauge(
            "limit_rate_requests_per_second",
            "Configured request-rate budgets, converted to requests per second.",
            ("limit",),
        )
        self.deadline = gauge("limit_request_deadline_seconds", "Configured request deadline.")
        self.max_response = gauge(
            "limit_response_size_bytes", "Configured bound on the size of one response."
        )
        self.degraded = gauge(
            "limiter_degraded",
            "1 while shared (Redis) limits are unavailable and per-process limits apply.",
        )
        self.auth_failures = counter(
            "auth_failures_total",
            "Requests refused by the bearer check (401/403), by reason.",
            ("reason",),
        )
        self.tokens = counter("tokens_issued_total", "Access tokens issued, by grant.", ("grant",))
        self.db_latency = histogram(
            "db_call_duration_seconds",
            "PostgreSQL call latency, by operation.",
            DEPENDENCY_BUCKETS,
            ("operation",),
        )
        self.db_errors = counter(
            "db_call_errors_total", "PostgreSQL calls that failed, by operation.", ("operation",)
        )
        self.redis_latency = histogram(
            "redis_call_duration_seconds",
            "Redis call latency, by operation.",
            DEPENDENCY_BUCKETS,
            ("operation",),
        )
        self.redis_errors = counter(
            "redis_call_errors_total", "Redis calls that failed, by operation.", ("operation",)
        )
        self.http_requests = counter(
            "http_requests_total",
            "HTTP requests on the main listener, by route template, method and status.",
            ("route", "method", "status"),
        )
        self.http_latency = histogram(
            "http_request_duration_seconds",
            "HTTP request latency on the main listener, by route template.",
            LATENCY_BUCKETS,
            ("route",),
        )
        self.draining = gauge(
            "draining", "1 once shutdown started: readiness fails, in-flight requests finish."
        )
        self.loop_lag = histogram(
            "event_loop_lag_seconds",
            "How late the event loop runs a timer: CPU saturation of this process.",
            LOOP_LAG_BUCKETS,
        )
        self.shed = counter(
            "shed_requests_total",
            "Requests refused at once with 503 because this replica is overloaded, by signal.",
            ("reason",),
        )
        self.shedding = gauge(
            "shedding", "1 while event-loop lag makes this replica refuse new requests."
        )
        self.overload = OverloadMetrics(reg)  # the in-flight limit of load shedding
        self.open_connections = gauge(
            "open_connections", "Client connections open on the main listener."
        )
        self.max_connections = gauge(
            "max_connections", "Configured cap on open connections of the main listener."
        )
        self.connection_cuts = counter(
            "connection_cuts_total",
            "Connections closed or refused by the slow and idle client guards, by reason.",
            ("reason",),
        )
        self.abandoned_requests = counter(
            "abandoned_requests_total",
            "Requests whose client closed the connection before their body was in (499).",
        )
        self.paced_refusals = counter(
            "paced_refusals_total",
            "Refusals whose answer waited because their connection kept being refused.",
        )
        self.registration_refusals = counter(
            "registration_refusals_total",
            "Dynamic client registrations refused, by reason.",
            ("reason",),
        )
        self.clients_removed = counter(
            "unused_clients_removed_total",
            "Clients deleted because they never completed an authorization, by kind.",
            ("kind",),
        )
        Info(f"{PREFIX}_build", "Version of the running service.", registry=reg).info(
            {"version": _version(), "python_version": platform.python_version()}
        )
        ProcessCollector(registry=reg)
        self._prefill()

    def _prefill(self) -> None:
        # Zero-valued series for every bounded label value alerts and rates read: a series
        # that appears only on its first event makes rate() and absent() lie until then.
        for limit in LIMITS:
            self.refusals.labels(limit)
        for reason in AUTH_REASONS:
            self.auth_failures.labels(reason)
        for reason in SHED_REASONS:
            self.shed.labels(reason)
        for reason in CONNECTION_CUTS:
            self.connection_cuts.labels(reason)
        for grant in GRANTS:
            self.tokens.labels(grant)
        for reason in REGISTRATION_REFUSALS:
            self.registration_refusals.labels(reason)
        for kind in CLIENT_KINDS:
            self.clients_removed.labels(kind)
        for tool in sorted(TOOLS):
            self.requests.labels("tools/call", tool, "ok", NONE)
            self.requests.labels("tools/call", tool, "error", NONE)
            self.latency.labels("tools/call", tool)
            self.operation.labels("tools/call", tool, "")
            self.db_errors.labels(tool)
        for operation in sorted(REDIS_OPERATIONS):
            self.redis_errors.labels(operation)


def _version() -> str:
    try:
        return metadata.version("elova-mcp")
    except metadata.PackageNotFoundError:
        return "unknown"
