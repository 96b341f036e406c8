"""Helpers for OAuth tests: seeded accounts, PKCE, HTML forms, and the browser steps done
with plain HTTP (what a person does in the browser, as requests)."""

from __future__ import annotations

import base64
import hashlib
import secrets
import uuid
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg

from service.store.load_snapshot import load_snapshot
from tests.support import snapshots
from tests.support.mcp_wire import tool_call as wire_tool_call

PASSWORD = "correct horse battery staple"
REDIRECT_URI = "http://127.0.0.1:53682/callback"
# What a browser sends for a page (error_pages.wants_html: it names text/html).
BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


@dataclass
class Account:
    id: str
    email: str
    password: str
    workspaces: list[str]


async def seed_account(
    pool: asyncpg.Pool,
    *,
    workspaces: int = 2,
    password: str = PASSWORD,
    names: list[str] | None = None,
) -> Account:
    """An account (with a password) that owns `workspaces` new workspaces, loaded through
    the snapshot loader like production data."""
    snap = snapshots.Snapshot()
    owner = snap.account(password=password)
    ids = []
    for i in range(workspaces):
        name = names[i] if names and i < len(names) else f"Workspace {i:03d} {uuid.uuid4().hex[:6]}"
        ws = snap.workspace(
            name=name,
            timeZone="Europe/Berlin",
            members=[snapshots.member(owner, "admin" if i % 2 else "owner")],
        )
        ids.append(ws["id"])
    async with pool.acquire() as conn:
        await load_snapshot(conn, snap.document())
    return Account(owner["id"], owner["email"], password, ids)


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class _Forms(HTMLParser):
    """Every form on a page: its action and its successful controls."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append({"action": a.get("action", ""), "fields": [], "options": []})
        elif tag in ("input", "button") and self.forms:
            kind = a.get("type", "text")
            name = a.get("name")
            if not name:
                return
            if kind in ("checkbox", "radio"):
                self.forms[-1]["options"].append((name, a.get("value", ""), "checked" in a))
            elif kind == "hidden":
                self.forms[-1]["fields"].append((name, a.get("value", "")))


def forms(html: str) -> list[dict[str, Any]]:
    parser = _Forms()
    parser.feed(html)
    return parser.forms


def hidden(html: str, index: int = 0) -> list[tuple[str, str]]:
    return list(forms(html)[index]["fields"])


def query_of(location: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


@dataclass
class Registered:
    client_id: str
    redirect_uri: str
    body: dict[str, Any] = field(default_factory=dict)


def authorize_params(
    reg: Registered, challenge: str, our_resource: str, /, **over: str | None
) -> dict[str, str]:
    params: dict[str, str | None] = {
        "response_type": "code",
        "client_id": reg.client_id,
        "redirect_uri": reg.redirect_uri,
        "state": "st-" + secrets.token_urlsafe(8),
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "scope": "workspaces:read n8n:read",
        "resource": our_resource,
    }
    params.update(over)
    return {k: v for k, v in params.items() if v is not None}


def tool_call(name: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A stateless (2026-07-28) tools/call request: body and headers, without the token."""
    return wire_tool_call(name, arguments, client="oauth-test")


def bearer(headers: dict[str, str], token: str | None) -> dict[str, str]:
    return {**headers, "Authorization": f"Bearer {token}"} if token else dict(headers)
