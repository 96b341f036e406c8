"""The pure parts of tracing: when the OTEL_* variables turn it on, what a statement's span
is named, and that nothing of OpenTelemetry is imported by the service until then."""

from __future__ import annotations

import subprocess
import sys

import pytest

from service.config import Config
from service.observability.tracing.statements import summarize
from service.settings.tracing import configured

pytestmark = pytest.mark.unit

ENDPOINT = "http://127.0.0.1:4318"


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT + "/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "false"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False),
    ],
)
def test_tracing_is_on_only_with_an_endpoint(env: dict[str, str], on: bool) -> None:
    assert configured(env) is on
    base = {"ELOVA_DATABASE_URL": "postgresql://u@h/db"}
    assert Config.from_env({**base, **env}, need_key=False).tracing is on


@pytest.mark.parametrize(
    ("sql", "summary"),
    [
        ("SELECT id FROM executions WHERE id = $1", "SELECT executions"),
        ("  select e.id from executions e join workflows w on w.id = e.workflow_id",
         "SELECT executions workflows"),
        ("SELECT extract(epoch FROM e.stopped_at) FROM executions e", "SELECT executions"),
        ("WITH a AS (SELECT * FROM approval_state($1)) SELECT * FROM a LEFT JOIN LATERAL "
         "(SELECT 1 FROM executions) s ON true", "WITH approval_state executions"),
        ("INSERT INTO approval_activity (a) VALUES ($1) ON CONFLICT DO NOTHING",
         "INSERT approval_activity"),
        ("UPDATE approvals SET last_used_at = $2 WHERE id = $1", "UPDATE approvals"),
        ("DELETE FROM oauth_clients WHERE registered_at < $1", "DELETE oauth_clients"),
        ("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "BEGIN"),
        ("-- a comment\nSELECT 1", "SELECT"),
        ("SELECT 'literal FROM secrets' ", "SELECT"),
    ],
)  # fmt: skip
def test_a_statement_span_is_named_by_its_operation_and_tables(sql: str, summary: str) -> None:
    assert summarize(sql)[1] == summary


# What tracing loads once configured. (redis-py 7 imports opentelemetry.sdk.metrics, and
# with it the API, on its own when the SDK is installed, to offer its optional metrics: not
# ours, and it records nothing unless an application turns it on.)
TRACING_MODULES = ("opentelemetry.sdk.trace", "opentelemetry.exporter", "opentelemetry.propagate",
                   "google.protobuf", "service.observability.tracing.provider",
                   "service.observability.tracing.statements", "service.mcp.span")  # fmt: skip


def test_the_service_imports_no_tracing_sdk_until_tracing_is_configured() -> None:
    code = (
        "import sys, service.app, service.__main__, service.mcp.transport, service.store.db, "
        "service.limits.admission, service.observability.logs, service.server.access_log, "
        "service.observability.metrics.listener; "
        f"print(sorted(m for m in sys.modules if m.startswith({TRACING_MODULES!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
