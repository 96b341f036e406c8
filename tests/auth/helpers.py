"""Helpers for auth tests: an app with only the auth routes, and tokens forged for attacks.

Accounts and approvals come from tests/support/approvals.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import asyncpg
import jwt
from aiohttp import web
from aiohttp.test_utils import TestClient
from cryptography.hazmat.primitives import serialization

from service.app_keys import APPROVAL_READS, CONFIG, DB_POOL, METRICS, TOKENS
from service.auth.authorization import Authorization
from service.auth.bearer import auth_reason, challenge, verify
from service.auth.setup import setup_auth
from service.auth.tokens import TokenService
from service.config import Config
from service.errors import AuthError, Unavailable
from service.observability.metrics.app_metrics import Metrics
from tests.support.approvals import Member


class RecordingMetrics:
    """Records what the auth code reports; every other Metrics method is a no-op. Not a
    subclass, so it keeps working whatever the real Metrics needs to be constructed."""

    def __init__(self) -> None:
        self.auth_failures: list[str] = []
        self.db_calls: list[tuple[str, float, bool]] = []

    def auth_failed(self, reason: str) -> None:
        self.auth_failures.append(reason)

    def db_call(self, operation: str, seconds: float, error: bool) -> None:
        self.db_calls.append((operation, seconds, error))

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


SeedFn = Callable[..., Awaitable[Member]]
ClientFactory = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]


@dataclass
class AuthApp:
    client: TestClient[web.Request, web.Application]
    metrics: RecordingMetrics
    app: web.Application = field(repr=False)


async def probe(request: web.Request) -> web.Response:
    """Stands in for /mcp: answers the caller, or the error the transport would answer."""
    try:
        caller = await Authorization(
            verify(request, request.app[TOKENS]), request.app[APPROVAL_READS].read
        ).confirm()
    except AuthError as err:
        request.app[METRICS].auth_failed(auth_reason(err))  # as service/mcp/error_boundary.py does
        headers = {"WWW-Authenticate": challenge(err, request.app[CONFIG])}
        return web.json_response({"error": err.error}, status=err.status, headers=headers)
    except Unavailable as err:
        return web.json_response({"error": err.code}, status=503)
    return web.json_response(
        {
            "account": str(caller.account_id),
            "approval": str(caller.approval_id),
            "generation": caller.generation,
            "clientId": caller.client_id,
            "scopes": sorted(caller.scopes),
            "eligible": {str(k): v for k, v in caller.eligible.items()},
        }
    )


def build_app(cfg: Config, pool: asyncpg.Pool) -> tuple[web.Application, RecordingMetrics]:
    app = web.Application()
    app[CONFIG] = cfg
    metrics = RecordingMetrics()
    app[METRICS] = cast(Metrics, metrics)
    app[DB_POOL] = pool
    setup_auth(app)
    app.router.add_route("*", "/mcp", probe)
    return app, metrics


def unbacked_token(
    tokens: TokenService, *, not_after: float | None = None, now: float | None = None
) -> tuple[str, int]:
    """A well-signed access token (and its lifetime) for an approval that does not exist."""
    return tokens.issue_access_token(
        account_id=uuid.uuid4(),
        client_id="c",
        scopes=["n8n:read"],
        approval_id=uuid.uuid4(),
        generation=1,
        not_after=not_after,
        now=now,
    )


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return jwt.get_unverified_header(token), jwt.decode(token, options={"verify_signature": False})


def sign(private_pem: bytes, claims: dict[str, Any], header: dict[str, Any]) -> str:
    key = serialization.load_pem_private_key(private_pem, password=None)
    alg = header.pop("alg")
    return jwt.encode(claims, key, algorithm=alg, headers=header)  # type: ignore[arg-type]


def unsigned(claims: dict[str, Any], header: dict[str, Any], signature: bytes = b"") -> str:
    head = b64(json.dumps(header).encode())
    body = b64(json.dumps(claims).encode())
    return f"{head}.{body}.{b64(signature)}"


def hs256(secret: bytes, claims: dict[str, Any], header: dict[str, Any]) -> str:
    head = b64(json.dumps({**header, "alg": "HS256"}).encode())
    body = b64(json.dumps(claims).encode())
    mac = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(mac)}"


def now() -> int:
    return int(time.time())
