"""Prometheus metrics: the `Metrics` interface, over one app's families
(service/observability/metrics/families.py: the registry, names, help texts, labels and buckets).

Other modules call only the methods of `Metrics`; none of them takes a user, token, session
or address, and every label value is checked against a fixed set (anything else becomes
"other"; the sets are in labels.py), so no caller can grow the number of series. An app
gets its Metrics and the /metrics listener from `setup_metrics` (listener.py); the app
factory installs the access log (service/server/access_log.py) on its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from service.config import Config
from service.observability.metrics.families import Families
from service.observability.metrics.labels import (
    AUTH_REASONS,
    CLIENT_KINDS,
    CONNECTION_CUTS,
    DB_OPERATIONS,
    GRANTS,
    HTTP_METHODS,
    LIMITS,
    METHODS,
    NONE,
    OTHER,
    OUTCOMES,
    REDIS_OPERATIONS,
    REGISTRATION_REFUSALS,
    RPC_ERROR_CODES,
    SHED_REASONS,
    TOOL_ERROR,
    TOOL_ERROR_CODES,
    TOOLS,
    bounded,
    http_status_label,
)
from service.observability.metrics.updates import count, observe, shift
from service.observability.trace_ids import current_trace_ids

_KNOWN_LABEL_SETS = 4096  # remembered argument tuples a method (more are looked up)


class Metrics(Families):
    """Every metric of one app (service/observability/metrics/families.py) and what the
    service does to them: each method takes bounded label values only."""

    def __init__(self, cfg: Config | None = None) -> None:
        super().__init__()
        self.listen_port: int | None = None  # the bound /metrics port once listening
        self._routes: frozenset[str] = frozenset()
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        # The children each call of observe_rpc / observe_http touches, by its arguments
        # (one dict lookup a request instead of bounding and looking up every label).
        self._rpc_children: dict[
            tuple[str, str | None, str, int | None], tuple[Any, Any, Any, Any]
        ] = {}
        self._http_children: dict[tuple[str | None, str, int], tuple[Any, Any]] = {}
        # The latency child of each statement or Redis operation, by the name given.
        self._db_children: dict[str, Any] = {}
        self._redis_children: dict[str, Any] = {}
        self._auth_children: dict[str, Any] = {}  # auth_failed's, by reason
        if cfg is not None:
            self.set_limits(cfg)

    def set_limits(self, cfg: Config) -> None:
        """Expose the configured caps so saturation panels can divide by them."""
        limits = cfg.limits
        self.concurrency_limit.labels("global").set(limits.global_concurrency)
        self.replica_capacity.set(limits.global_concurrency)
        self.concurrency_limit.labels("account").set(limits.account_concurrency)
        self.rate_limit.labels("approval").set(limits.approval_per_minute / 60)
        if limits.account_per_day is not None:
            self.rate_limit.labels("account_daily").set(limits.account_per_day / 86400)
        self.deadline.set(limits.request_deadline_seconds)
        self.max_response.set(limits.max_response_bytes)
        self.max_connections.set(cfg.connections.max_connections)

    def set_routes(self, routes: Iterable[str]) -> None:
        """The route templates the app serves: the only values the `route` label takes."""
        self._routes = frozenset(routes)

    # The interface other modules call -----------------------------------------------

    def observe_rpc(
        self,
        method: str,
        tool: str | None,
        outcome: str,
        seconds: float,
        response_bytes: int,
        *,
        rpc_code: int | None = None,
    ) -> None:
        """One JSON-RPC request answered. outcome: ok | tool_error:<CODE> | protocol_error |
        auth_error | limited | error; rpc_code: the JSON-RPC code of an error answer. Its
        latency carries the trace as an exemplar when the request was traced."""
        key = (method, tool, outcome, rpc_code)
        children = self._rpc_children.get(key)
        if children is None:
            kind, _, code = outcome.partition(":")
            method_label = bounded(method, METHODS)
            tool_label = bounded(tool, TOOLS)
            kind_label = bounded(kind, OUTCOMES)
            code_label = bounded(code, TOOL_ERROR_CODES) if kind_label == "tool_error" else NONE
            children = (
                self._child(self.requests, method_label, tool_label, kind_label, code_label),
                self._child(self.latency, method_label, tool_label),
                self._child(self.response_size, method_label, tool_label),
                self._child(
                    self.operation,
                    method_label,
                    "" if tool_label == NONE else tool_label,
                    _error_type(kind_label, rpc_code),
                ),
            )
            if len(self._rpc_children) < _KNOWN_LABEL_SETS:  # bounded: a method is any text
                self._rpc_children[key] = children
        requests, latency, size, operation = children
        count(requests)
        seconds = max(seconds, 0.0)
        exemplar = _exemplar()
        observe(latency, seconds, exemplar)
        observe(operation, seconds, exemplar)
        observe(size, max(response_bytes, 0))

    def request_started(self) -> None:
        """A request's method starts (in-flight gauge +1): an admitted request, or one whose
        admission is still on its way (overlapped admission, docs/decisions/limits.md)."""
        shift(self.inflight, 1)

    def request_finished(self) -> None:
        """That request's method ended (in-flight gauge -1)."""
        shift(self.inflight, -1)

    def limit_refused(self, limit: str) -> None:
        """A 429: limit is global | account | approval | account_daily."""
        self._child(self.refusals, bounded(limit, LIMITS)).inc()

    def limit_waited(self, seconds: float, admitted: bool) -> None:
        """A request over a concurrency cap waited `seconds` for a slot, then was admitted
        or refused."""
        outcome = "admitted" if admitted else "refused"
        self._child(self.slot_waits, outcome).observe(max(seconds, 0.0))

    def replica_capacity_changed(self, capacity: int) -> None:
        self.replica_capacity.set(capacity)

    def limiter_degraded(self, degraded: bool) -> None:
        """Shared (Redis) limits unavailable → per-process limits."""
        self.degraded.set(1 if degraded else 0)

    def auth_failed(self, reason: str) -> None:
        """A 401/403: reason is missing | malformed | expired | signature | audience | issuer |
        revoked | approval_expired | insufficient_scope | other."""
        child = self._auth_children.get(reason)
        if child is None:
            child = self._child(self.auth_failures, bounded(reason, AUTH_REASONS))
            if len(self._auth_children) < _KNOWN_LABEL_SETS:
                self._auth_children[reason] = child
        count(child)

    def token_issued(self, grant: str) -> None:
        """grant: authorization_code | refresh_token | operator | jwt_bearer (an ID-JAG)."""
        self.tokens.labels(bounded(grant, GRANTS)).inc()

    def db_call(self, operation: str, seconds: float, error: bool) -> None:
        """One PostgreSQL call (operation: a fixed name such as the tool or 'auth')."""
        child = self._db_children.get(operation)
        if child is None:
            child = self._operation_child(
                self._db_children, self.db_latency, operation, DB_OPERATIONS
            )
        observe(child, max(seconds, 0.0))
        if error:
            self.db_errors.labels(bounded(operation, DB_OPERATIONS)).inc()

    def redis_call(self, operation: str, seconds: float, error: bool) -> None:
        """One Redis call (operation: admit | release | session | other)."""
        child = self._redis_children.get(operation)
        if child is None:
            child = self._operation_child(
                self._redis_children, self.redis_latency, operation, REDIS_OPERATIONS
            )
        observe(child, max(seconds, 0.0))
        if error:
            self.redis_errors.labels(bounded(operation, REDIS_OPERATIONS)).inc()

    # Used by the request-log middleware and the drain --------------------------------

    def observe_http(self, route: str | None, method: str, status: int, seconds: float) -> None:
        """One HTTP request on the main listener (route: the matched route template)."""
        key = (route, method, status)
        children = self._http_children.get(key)
        if children is None:
            route_label = bounded(route, self._routes, absent=OTHER)
            children = (
                self._child(
                    self.http_requests,
                    route_label,
                    bounded(method, HTTP_METHODS),
                    http_status_label(status),
                ),
                self._child(self.http_latency, route_label),
            )
            if len(self._http_children) < _KNOWN_LABEL_SETS:
                self._http_children[key] = children
        requests, latency = children
        count(requests)
        observe(latency, max(seconds, 0.0), _exemplar())

    def _operation_child(
        self, known: dict[str, Any], latency: Any, operation: str, allowed: frozenset[str]
    ) -> Any:
        """The latency child of `operation` (bounded to `allowed`), remembered in `known` by
        the name as given (at most _KNOWN_LABEL_SETS names)."""
        child = self._child(latency, bounded(operation, allowed))
        if len(known) < _KNOWN_LABEL_SETS:
            known[operation] = child
        return child

    def _child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, remembered: label values here are bounded sets, and
        prometheus-client's own lookup (lock, validation) is a cost on every request."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def registration_refused(self, reason: str) -> None:
        """reason: rate | size | host | redirect_uri | metadata."""
        self._child(self.registration_refusals, bounded(reason, REGISTRATION_REFUSALS)).inc()

    def unused_clients_removed(self, kind: str, count: int) -> None:
        """Clients deleted by the retention sweep; kind: dynamic | metadata."""
        self._child(self.clients_removed, bounded(kind, CLIENT_KINDS)).inc(count)

    def request_admitted(self) -> None:
        """A request on a shed route that load shedding let in."""
        count(self.overload.admitted)  # every request of /mcp, refusals included

    def request_shed(self, reason: str) -> None:
        """A 503 from load shedding: reason is loop_lag | inflight."""
        self._child(self.shed, bounded(reason, SHED_REASONS)).inc()

    def set_shedding(self, shedding: bool) -> None:
        self.shedding.set(1 if shedding else 0)

    def set_open_connections(self, count: int) -> None:
        self.open_connections.set(count)

    def connection_cut(self, reason: str) -> None:
        """reason: header_timeout | body_timeout | idle_evicted | stalled_evicted |
        share_evicted | refused."""
        self._child(self.connection_cuts, bounded(reason, CONNECTION_CUTS)).inc()

    def request_abandoned(self) -> None:
        """A client closed its connection before its request's body was in."""
        self.abandoned_requests.inc()

    def refusal_paced(self) -> None:
        self.paced_refusals.inc()

    def set_draining(self, draining: bool) -> None:
        self.draining.set(1 if draining else 0)

    def exposition(self, openmetrics: bool = False) -> bytes:
        """The exposition of this app's registry: Prometheus text, or OpenMetrics (the only
        one that carries exemplars) when the scraper asks for it."""
        if openmetrics:
            body: bytes = generate_openmetrics(self.registry)  # type: ignore[no-untyped-call]
            return body
        return generate_latest(self.registry)


def _error_type(kind: str, rpc_code: int | None) -> str:
    if rpc_code is not None:
        code = str(rpc_code)
        return code if code in RPC_ERROR_CODES else "_OTHER"
    return TOOL_ERROR if kind == TOOL_ERROR else ""


def _exemplar() -> dict[str, str] | None:
    """The traced request's ids as an exemplar (OpenMetrics), None when not traced."""
    ids = current_trace_ids()
    return None if ids is None else {"trace_id": ids[0], "span_id": ids[1]}
