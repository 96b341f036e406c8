"""Structured logs as an operator reads them: JSON lines, request ids, nothing secret."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from typing import Any

import pytest
from aiohttp import web

from service.edge.headers import REQUEST_ID as REQUEST_ID_HEADER
from service.observability.logs import (
    CURRENT_REQUEST_ID,
    JsonFormatter,
    LineHandler,
    Redaction,
    log_redacted,
    redact,
    redact_text,
)
from service.observability.stdout import LineOutput
from tests.support.serve_process import ServeProcess
from tests.support.served_app import StartApp

JWT = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
SECRETS = (JWT, "s3cr3t-refresh", "hunter2", "PRIVATEKEYBODY")


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (f"Authorization: Bearer {JWT}", "Authorization: Bearer [redacted]"),
        (f"token was {JWT} here", "token was [redacted-jwt] here"),
        (
            "GET /oauth/token?code=abc123&state=xyz&x=1",
            "GET /oauth/token?code=[redacted]&state=[redacted]&x=1",
        ),
        ("/cb?access_token=s3cr3t-refresh", "/cb?access_token=[redacted]"),
        ('{"refresh_token": "s3cr3t-refresh"}', '{"refresh_token": "[redacted]"}'),
        ("postgresql://elova:hunter2@db:5432/elova", "postgresql://elova:[redacted]@db:5432/elova"),
        (
            "-----BEGIN PRIVATE KEY-----\nPRIVATEKEYBODY\n-----END PRIVATE KEY-----",
            "[redacted-key]",
        ),
        ("Basic dXNlcjpodW50ZXIy", "Basic [redacted]"),
        ("workspace 1f0e and execution 42 failed", "workspace 1f0e and execution 42 failed"),
    ],
)
def test_redaction_masks_credentials_and_keeps_the_rest(text: str, kept: str) -> None:
    assert redact_text(text) == kept


def test_fields_named_like_credentials_are_replaced() -> None:
    assert redact("authorization", "anything") == "[redacted]"
    assert redact("client_secret", "x") == "[redacted]"
    assert redact("headers", {"Cookie": "a=b", "Accept": "json"}) == {
        "Cookie": "[redacted]",
        "Accept": "json",
    }
    assert redact("count", 3) == 3
    assert len(redact("note", "x" * 5000)) <= 2001


def _lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


async def test_one_line_a_request_with_its_request_id(
    start_app: StartApp, access_lines: io.StringIO
) -> None:
    client = await start_app()
    resp = await client.get(
        f"/readyz?access_token={JWT}&code=s3cr3t-refresh",
        headers={"Authorization": f"Bearer {JWT}", "User-Agent": "probe/1.0"},
    )
    request_id = resp.headers[REQUEST_ID_HEADER]
    assert re.fullmatch(r"[0-9a-f]{32}", request_id)
    (line,) = _lines(access_lines)
    assert line["request_id"] == request_id
    assert line["path"] == "/readyz" and line["route"] == "/readyz"
    assert line["status"] == 200 and line["method"] == "GET"
    assert line["duration_ms"] >= 0 and line["response_bytes"] > 0
    assert line["user_agent"] == "probe/1.0"
    assert line["level"] == "debug"  # successful probes stay out of INFO logs
    assert not any(secret in access_lines.getvalue() for secret in SECRETS)


async def test_every_response_carries_a_request_id(
    start_app: StartApp, access_lines: io.StringIO
) -> None:
    client = await start_app()
    ids = set()
    for path in ("/livez", "/nowhere", "/readyz"):
        resp = await client.get(path)
        ids.add(resp.headers[REQUEST_ID_HEADER])
    assert len(ids) == 3
    assert {line["request_id"] for line in _lines(access_lines)} == ids
    assert [line["status"] for line in _lines(access_lines)] == [200, 404, 200]


async def test_a_well_formed_incoming_request_id_is_kept(start_app: StartApp) -> None:
    client = await start_app()
    kept = "lb-7f3a9c21-0001"
    resp = await client.get("/livez", headers={REQUEST_ID_HEADER: kept})
    assert resp.headers[REQUEST_ID_HEADER] == kept
    # Anything that could smuggle a credential into the logs is replaced.
    resp = await client.get("/livez", headers={REQUEST_ID_HEADER: JWT})
    assert resp.headers[REQUEST_ID_HEADER] != JWT


async def test_an_unhandled_error_is_a_bare_500_with_the_stack_in_the_log(
    start_app: StartApp, access_lines: io.StringIO, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError(f"failed with Bearer {JWT}")

    client = await start_app({"/test-broken": broken})
    resp = await client.get("/test-broken")
    assert resp.status == 500
    body = await resp.json()
    assert body == {"error": "internal_error", "requestId": resp.headers[REQUEST_ID_HEADER]}
    assert JWT not in json.dumps(body)
    error_records = [r for r in caplog.records if r.name == "service.server.access_log"]
    assert error_records and error_records[0].exc_info is not None
    formatted = JsonFormatter().format(error_records[0])
    parsed = json.loads(formatted)
    assert parsed["error"]["type"] == "RuntimeError"
    assert "Traceback" in parsed["error"]["stack"] and JWT not in formatted
    access = [line for line in _lines(access_lines) if line.get("path") == "/test-broken"]
    assert access[0]["status"] == 500 and access[0]["level"] == "error"


async def test_a_real_process_logs_json_lines_without_secrets(serve_env: dict[str, str]) -> None:
    async with ServeProcess(serve_env) as proc:
        answered = []
        for path in ("/readyz", f"/livez?refresh_token=s3cr3t-refresh&code={JWT}", "/nope"):
            resp = await proc.get(path, headers={"Authorization": f"Bearer {JWT}"})
            answered.append((resp.status, resp.headers[REQUEST_ID_HEADER]))
        proc.terminate()
        await asyncio.sleep(0.2)
        proc.terminate()  # a second signal skips the drain window
        assert await proc.wait(timeout=15) == 0
        output = proc.output()
        lines = proc.log_lines()  # every line parses as JSON
    assert not any(secret in output for secret in SECRETS)
    assert "hunter2" not in output and "BEGIN PRIVATE KEY" not in output
    access = [line for line in lines if line.get("event") == "http_request"]
    # Successful probes are DEBUG: at INFO only the 404 is an access line.
    assert [(a["status"], a["request_id"]) for a in access] == [answered[2]]
    for line in lines:
        assert {"time", "level", "logger", "message"} <= line.keys()


def test_a_pre_redacted_line_reads_the_same_written_directly_or_through_logging() -> None:
    """The access line skips the logging machinery when our handler is the only place it
    can go; with another handler beside it, it is logged as a record. Both write the same
    line (the time aside), and the other handler gets it too."""
    direct, beside = io.StringIO(), io.StringIO()
    logger = logging.getLogger("elova.test-direct-line")
    logger.propagate = False
    ours = LineHandler(LineOutput(direct))
    ours.setFormatter(JsonFormatter())
    ours.addFilter(Redaction())
    logger.handlers = [ours]
    logger.setLevel(logging.DEBUG)
    fields = {"event": "http_request", "status": 200, "path": "/mcp", "client": "203.0.113.9",
              "user_agent": "tést", "by_status": {"401": 2}}  # fmt: skip
    token = CURRENT_REQUEST_ID.set("req-direct-1")
    try:
        log_redacted(logger, logging.INFO, "POST /mcp 200", fields)
        other = LineHandler(LineOutput(beside))
        other.setFormatter(JsonFormatter())
        logger.addHandler(other)
        log_redacted(logger, logging.INFO, "POST /mcp 200", fields)
        logger.setLevel(logging.WARNING)
        log_redacted(logger, logging.INFO, "POST /mcp 200", fields)  # below the level: none
    finally:
        CURRENT_REQUEST_ID.reset(token)
        logger.handlers = []
    written, logged = direct.getvalue().splitlines(), beside.getvalue().splitlines()
    assert len(written) == 2 and len(logged) == 1
    first, second, other_line = (json.loads(line) for line in (*written, *logged))
    assert first.pop("time") and second.pop("time") and other_line.pop("time")
    assert first == second == other_line == {
        "level": "info", "logger": "elova.test-direct-line", "message": "POST /mcp 200",
        "request_id": "req-direct-1", **fields,
    }  # fmt: skip
    assert list(first) == list(second)  # the same order of keys too
