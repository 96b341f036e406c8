"""The audit trail's fixtures: the real app (create_app) on a loopback port writing its
audit lines to a file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from service.app import create_app
from service.config import Config
from tests.auth.browser_flow import OAuth


@pytest.fixture
def audit_file(tmp_path: Path) -> Path:
    return tmp_path / "audit.jsonl"


@pytest.fixture
async def audited(
    aiohttp_client: Any, make_config: Callable[..., Config], audit_file: Path
) -> OAuth:
    cfg = make_config(
        AUDIT_SINK=f"file:{audit_file}",
        OAUTH_CIMD_ALLOW_PRIVATE="true",
        LIMIT_APPROVAL_PER_MINUTE="12",
    )
    client: TestClient[web.Request, web.Application] = await aiohttp_client(create_app(cfg))
    return OAuth(client, cfg)
