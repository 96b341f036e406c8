"""The catalog copy matches the contract; pure header rules (Origin, Host, Accept, Mcp-Name)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import pytest

from service.config import Config
from service.mcp import guards
from service.mcp.catalog import Catalog
from service.mcp.versions import decode_header_value, is_modern, negotiate_session

SHARED_CATALOG = Path(__file__).resolve().parents[3] / "shared" / "spec" / "elova-tools.json"
SERVED_CATALOG = Path(__file__).resolve().parents[2] / "service" / "contract" / "elova-tools.json"


@pytest.mark.skipif(not SHARED_CATALOG.exists(), reason="../shared is not checked out here")
def test_served_catalog_is_the_contract_byte_for_byte() -> None:
    assert SERVED_CATALOG.read_bytes() == SHARED_CATALOG.read_bytes()


def test_catalog_has_the_nine_tools_in_order() -> None:
    catalog = Catalog.load()
    assert catalog.names == (
        "get_many_workspaces",
        "get_workspace",
        "get_many_instances",
        "get_execution_stats",
        "get_many_sync_jobs",
        "get_many_executions",
        "get_execution",
        "get_many_workflows",
        "get_workflow",
    )
    assert "get_workspace" in catalog and "run_workflow" not in catalog


@pytest.mark.parametrize(
    "raw, decoded",
    [
        ("get_workspace", "get_workspace"),
        ("=?base64?" + base64.b64encode("Hello, 世界".encode()).decode() + "?=", "Hello, 世界"),
        ("=?base64?IHBhZGRlZCA=?=", " padded "),
        ("=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=", "=?base64?literal?="),
        ("=?base64?not base64?=", None),
        ("=?base64?//79?=", None),  # not UTF-8
        ("=?BASE64?Zm9v?=", "=?BASE64?Zm9v?="),  # markers are case-sensitive: a plain value
        ("bad\x01value", None),
    ],
)
def test_mcp_name_decoding(raw: str, decoded: str | None) -> None:
    assert decode_header_value(raw) == decoded


@pytest.mark.parametrize(
    "header, meta, modern",
    [
        ("2026-07-28", "2026-07-28", True),
        (None, "2026-07-28", True),
        ("2025-11-25", None, False),
        ("2025-03-26", None, False),
        (None, None, False),
        ("1900-01-01", None, True),
    ],
)
def test_era(header: str | None, meta: str | None, modern: bool) -> None:
    assert is_modern(header, meta) is modern


def test_session_negotiation() -> None:
    assert negotiate_session("2025-06-18") == "2025-06-18"
    assert negotiate_session("2026-07-28") == "2025-11-25"


@pytest.fixture
def cfg(make_config: Callable[..., Config]) -> Config:
    return make_config(
        PUBLIC_URL="https://mcp.example.com", ALLOWED_ORIGINS="https://app.example.org"
    )


@pytest.mark.parametrize(
    "origin, ok",
    [
        (None, True),
        ("https://mcp.example.com", True),
        ("https://MCP.example.com/", True),
        ("https://app.example.org", True),
        ("http://mcp.example.com", False),
        ("https://mcp.example.com:8443", False),
        ("null", False),
        ("https://evil.example.com", False),
    ],
)
def test_origin(cfg: Config, origin: str | None, ok: bool) -> None:
    assert guards.origin_ok(origin, cfg) is ok


@pytest.mark.parametrize(
    "host, ok",
    [
        (None, True),
        ("mcp.example.com", True),
        ("mcp.example.com:443", True),
        ("app.example.org", True),
        ("localhost", False),
        ("evil.example.com", False),
        ("mcp.example.com.evil.net", False),
        ("[::1", False),
    ],
)
def test_host(cfg: Config, host: str | None, ok: bool) -> None:
    assert guards.host_ok(host, cfg) is ok
