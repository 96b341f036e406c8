"""Issue 54: with the demo on http://127.0.0.1:8080, a client configured as
http://localhost:8080/mcp refuses the resource metadata (the resource identifier is not
its URL). The metadata stays the one resource, byte for byte; the console names the URL
to configure, at once and once per name."""

from __future__ import annotations

import logging

import pytest

from service.auth import resource_metadata
from tests.auth.helpers import AuthApp

PATH = "/.well-known/oauth-protected-resource/mcp"


async def test_another_loopback_name_is_told_the_url_to_use(
    auth_app: AuthApp, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resource_metadata, "_WARNED", set())
    canonical = await (await auth_app.client.get(PATH)).read()
    caplog.set_level(logging.WARNING, logger="service.auth.resource_metadata")
    for host in ("localhost:8080", "localhost:8080", "[::1]:8080", "127.0.0.1:8080"):
        resp = await auth_app.client.get(PATH, headers={"Host": host})
        assert resp.status == 200 and await resp.read() == canonical
    warned = [r.getMessage() for r in caplog.records if r.name == resource_metadata.__name__]
    assert warned == [
        "a client came as http://localhost:8080: configure it with http://127.0.0.1:8080/mcp"
        " exactly (another loopback name is another OAuth resource, and its sign-in fails)",
        "a client came as http://[::1]:8080: configure it with http://127.0.0.1:8080/mcp"
        " exactly (another loopback name is another OAuth resource, and its sign-in fails)",
    ]


async def test_a_public_name_is_never_warned_about(
    auth_app: AuthApp, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resource_metadata, "_WARNED", set())
    caplog.set_level(logging.WARNING, logger="service.auth.resource_metadata")
    await auth_app.client.get(PATH, headers={"Host": "mcp.example.com"})
    assert not [r for r in caplog.records if r.name == resource_metadata.__name__]
