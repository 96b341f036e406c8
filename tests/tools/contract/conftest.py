"""The auditor's harness: a real app (create_app), a snapshot loaded with load_snapshot, a
real approval and bearer token, tools called over /mcp (2026-07-28), and every successful
structuredContent validated against the specification's outputSchema (Draft 2020-12 with
format checking). Tool errors are returned as they arrive, for the test to judge.

    async def test_x(audit: AuditFactory) -> None:
        snap = Snapshot(); ws = ...
        a = await audit(snap)                      # grants every workspace of the snapshot
        out = await a.ok("get_many_workspaces", {"limit": 5})
        err = await a.error("get_workspace", {"workspaceId": "…"})   # {code, message, ...}
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from jsonschema import Draft202012Validator

from service.app import create_app
from service.app_keys import DB_POOL, TOKENS
from service.config import Config
from service.store.load_snapshot import load_snapshot
from tests.support.approvals import Member, granted
from tests.support.mcp_wire import tool_call
from tests.support.snapshots import Snapshot, member

SPEC = Path("/work/shared/spec/elova-tools.json")
LOCAL_CATALOG = Path(__file__).resolve().parents[3] / "service" / "contract" / "elova-tools.json"
ClientFactory = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]


@cache
def _catalog() -> dict[str, Any]:
    path = SPEC if SPEC.exists() else LOCAL_CATALOG
    loaded: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return loaded


@cache
def validator(tool: str) -> Draft202012Validator:
    schema = next(t["outputSchema"] for t in _catalog()["tools"] if t["name"] == tool)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


class Audit:
    """One approval's view of /mcp."""

    def __init__(self, client: TestClient[web.Request, web.Application], token: str) -> None:
        self.client = client
        self.token = token

    async def raw(self, name: str, arguments: Any) -> tuple[int, dict[str, Any]]:
        body, headers = tool_call(name, arguments, token=self.token, client="audit")
        resp = await self.client.post("/mcp", data=msgspec.json.encode(body), headers=headers)
        text = await resp.text()
        return resp.status, json.loads(text) if text else {}

    async def result(self, name: str, arguments: Any) -> dict[str, Any]:
        status, body = await self.raw(name, arguments)
        assert status == 200, body
        result: dict[str, Any] = body["result"]
        return result

    async def ok(self, name: str, arguments: Any) -> dict[str, Any]:
        result = await self.result(name, arguments)
        assert result["isError"] is False, result["content"][0]["text"]
        structured: dict[str, Any] = result["structuredContent"]
        errors = [
            f"{list(e.absolute_path)}: {e.message}" for e in validator(name).iter_errors(structured)
        ]
        assert not errors, errors
        assert json.loads(result["content"][0]["text"]) == structured
        return structured

    async def error(self, name: str, arguments: Any) -> dict[str, Any]:
        """A tool error: checks its shape (docs/tools.md) and returns its `_meta` fields."""
        result = await self.result(name, arguments)
        assert result["isError"] is True, result.get("structuredContent")
        assert "structuredContent" not in result
        meta = {k: v for k, v in result["_meta"].items() if not k.startswith("io.")}
        assert set(meta) <= {"code", "message", "retryable", "hint", "retryAfterSeconds"}
        assert isinstance(meta["retryable"], bool)
        assert result["content"][0]["text"] == f"{meta['code']}: {meta['message']}"
        return meta

    async def pages(self, name: str, arguments: dict[str, Any], key: str) -> list[dict[str, Any]]:
        """Every row of a cursor-paginated list, following nextCursor to the end."""
        rows: list[dict[str, Any]] = []
        args = dict(arguments)
        for _ in range(1000):
            page = await self.ok(name, args)
            rows.extend(page[key])
            if page["nextCursor"] is None:
                return rows
            assert page[key], "a nextCursor led from an empty page"
            args = {**arguments, "cursor": page["nextCursor"]}
        raise AssertionError("pagination did not end")


AuditFactory = Callable[..., Awaitable[Audit]]


@pytest.fixture
def audit(aiohttp_client: ClientFactory, make_config: Callable[..., Config]) -> AuditFactory:
    """Load `snap` (adding one owner account to every workspace without members, unless
    given) and return an Audit for a new approval over `workspaces` (default: all), on an
    app built with the config `overrides` (ELOVA_* names without the prefix)."""
    apps: dict[str, TestClient[web.Request, web.Application]] = {}

    async def build(
        snap: Snapshot,
        *,
        workspaces: list[str] | None = None,
        scopes: str = "workspaces:read n8n:read",
        **overrides: Any,
    ) -> Audit:
        owner = snap.account()
        for ws in snap.arrays["workspaces"]:
            ws["members"] = [*ws.get("members", []), member(owner)]
        key = repr(sorted(overrides.items()))
        if key not in apps:
            apps[key] = await aiohttp_client(create_app(make_config(**overrides)))
        client = apps[key]
        pool = client.app[DB_POOL]
        async with pool.acquire() as conn:
            await load_snapshot(conn, snap.document())
        chosen = workspaces or [str(ws["id"]) for ws in snap.arrays["workspaces"]]
        who = Member(
            uuid.UUID(owner["id"]), owner["email"], [uuid.UUID(w) for w in chosen], uuid.uuid4()
        )
        _, issued = await granted(pool, client.app[TOKENS], who, scopes=scopes)
        return Audit(client, issued.access_token)

    return build
