"""The metrics' vocabulary: the name prefix, the fixed label sets and the buckets.

Every label value a metric takes is checked against one of these sets (`bounded`), so no
caller can grow the number of series; app_metrics.py builds the metrics from them.
"""

from __future__ import annotations

from collections.abc import Iterable

from service.contract.catalog_file import tool_names

PREFIX = "elova_mcp"
OTHER = "other"
NONE = "none"

# The tools: the catalog's own names, so a tool added to it is a label value at once.
TOOLS = frozenset(tool_names())
METHODS = frozenset(
    {
        "initialize",
        "notifications/initialized",
        "notifications/cancelled",
        "ping",
        "server/discover",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "prompts/list",
        "GET",
        "DELETE",
    }
)
OUTCOMES = frozenset({"ok", "tool_error", "protocol_error", "auth_error", "limited", "error"})
TOOL_ERROR_CODES = frozenset(
    {
        "VALIDATION_ERROR",
        "NOT_FOUND",
        "MCP_CURSOR_STALE",
        "UNAVAILABLE",
        "DEADLINE_EXCEEDED",
        "INTERNAL",
    }
)
LIMITS = ("global", "account", "approval", "account_daily")
AUTH_REASONS = (
    "missing",
    "malformed",
    "expired",
    "signature",
    "audience",
    "issuer",
    "revoked",
    "approval_expired",
    "insufficient_scope",
    "other",
)
GRANTS = ("authorization_code", "refresh_token", "operator", "jwt_bearer")
SHED_REASONS = ("loop_lag", "inflight")
CONNECTION_CUTS = (
    "header_timeout",
    "body_timeout",
    "idle_evicted",
    "stalled_evicted",
    "share_evicted",
    "refused",
)
# Why POST /register refused a client: the per-address limit (429), a value or the document
# over its bound, a redirect URI's host, another redirect-URI rule, other metadata (a bad
# value, a body that is not a JSON object).
REGISTRATION_REFUSALS = ("rate", "size", "host", "redirect_uri", "metadata")
CLIENT_KINDS = ("dynamic", "metadata")
DB_OPERATIONS = frozenset(
    TOOLS | {"auth", "oauth", "approvals", "sessions", "health", "load", "other"}
)
REDIS_OPERATIONS = frozenset({"admit", "release", "probe", "session", "health", "other"})
HTTP_METHODS = frozenset({"GET", "POST", "DELETE", "HEAD", "OPTIONS", "PUT", "PATCH"})

# The latency SLO is "99% of tool calls under 250 ms" (docs/operations.md): 0.25 is an exact
# bucket bound so the SLI is a plain bucket ratio, with resolution on both sides of it.
LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
    5.0, 10.0, 30.0,
)  # fmt: skip
DEPENDENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 30.0,
)  # fmt: skip
SIZE_BUCKETS = (256, 1024, 4096, 16384, 65536, 131072, 262144, 524288)
# The MCP server metric of the OpenTelemetry semantic conventions (mcp.server.operation.duration,
# docs/operations.md, Tracing): its name and buckets are the conventions', not ours.
OPERATION_METRIC = "mcp_server_operation_duration_seconds"
OPERATION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
# error_type: the JSON-RPC error code of an error answer, "tool_error" for a result with
# isError, "" when the operation succeeded; a code outside this set is "_OTHER".
RPC_ERROR_CODES = frozenset({"-32700", "-32600", "-32601", "-32602", "-32603", "401", "403", "429"})
TOOL_ERROR = "tool_error"
LOOP_LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
LOOP_PROBE_SECONDS = 0.5


def bounded(value: str | None, allowed: Iterable[str], *, absent: str = NONE) -> str:
    """The label value itself when it is one of the fixed set, else "other"."""
    if value is None or value == "":
        return absent
    return value if value in allowed else OTHER


def http_status_label(status: int) -> str:
    """Statuses the service answers are kept; anything unusual is folded to its class."""
    if status in _KNOWN_STATUSES:
        return str(status)
    return f"{status // 100}xx" if 100 <= status <= 599 else OTHER


_KNOWN_STATUSES = frozenset(
    {200, 201, 202, 204, 301, 302, 303, 304, 307, 308, 400, 401, 403, 404, 405, 406, 409, 413,
     415, 422, 429, 499, 500, 502, 503, 504}
)  # fmt: skip

# The wait for a concurrency slot: about 2 s at most by default (ELOVA_LIMIT_SLOT_WAIT_MS).
SLOT_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)
