"""Enterprise-managed authorization fixtures: a test IdP on loopback, the real app trusting
it (`elova-mcp idp add`, in a subprocess), a confidential client registered for the
jwt-bearer grant, and a person of the IdP's domain with an account here."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from service.app import create_app
from service.auth.enterprise import jwks
from service.config import Config
from tests.auth.browser_flow import OAuth
from tests.auth.enterprise.idp import LoopbackIdp
from tests.auth.flow import Account, seed_account
from tests.auth.helpers import ClientFactory
from tests.auth.test_cli import ELOVA

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def basic(client_id: str, secret: str) -> dict[str, str]:
    pair = f"{quote(client_id, safe='')}:{quote(secret, safe='')}".encode()
    return {"Authorization": "Basic " + base64.b64encode(pair).decode()}


async def idp_cli(cfg: Config, *args: str, sink: str | None = None) -> tuple[int, str, str]:
    """`elova-mcp idp ARGS` in a subprocess: (exit status, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
    env |= {"ELOVA_DATABASE_URL": cfg.database_url, "ELOVA_PUBLIC_URL": cfg.public_url}
    env |= {"ELOVA_AUDIT_SINK": sink} if sink else {}
    done = await asyncio.to_thread(
        subprocess.run, [str(ELOVA), "idp", *args], env=env, capture_output=True, text=True
    )
    return done.returncode, done.stdout, done.stderr


@dataclass
class Enterprise:
    oauth: OAuth
    idp: LoopbackIdp
    idp_url: str
    domain: str
    client_id: str
    client_secret: str
    person: str  # the IdP's subject
    account: Account
    audit_file: Path

    @property
    def basic(self) -> dict[str, str]:
        return basic(self.client_id, self.client_secret)

    async def trust(self, *extra: str) -> None:
        code, _, err = await idp_cli(
            self.oauth.cfg, "add", "--issuer", self.idp.issuer,
            "--jwks-uri", f"{self.idp_url}/jwks", "--domain", self.domain, *extra,
        )  # fmt: skip
        assert code == 0, err

    async def grant(self, assertion: str, **form: str) -> aiohttp.ClientResponse:
        body = {"grant_type": JWT_BEARER, "assertion": assertion,
                "resource": self.oauth.resource, **form}  # fmt: skip
        return await self.oauth.http.post("/token", data=body, headers=self.basic)

    def id_jag(self, **claims: Any) -> str:
        claims.setdefault("sub", self.person)
        claims.setdefault("client_id", self.client_id)
        return self.idp.id_jag(**claims)


@pytest.fixture(autouse=True)
def _refetch_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The once-a-minute refetch bound, lifted so a rotation is seen within a test (the
    bound itself: test_jwks_refetch_is_bounded)."""
    monkeypatch.setattr(jwks, "REFETCH_SECONDS", 0.0)


@pytest.fixture
async def enterprise(
    aiohttp_client: ClientFactory,
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
    make_config: Callable[..., Config],
    tmp_path: Path,
) -> Enterprise:
    audit_file = tmp_path / "audit.jsonl"
    cfg = make_config(OAUTH_CIMD_ALLOW_PRIVATE="true", AUDIT_SINK=f"file:{audit_file}")
    oauth = OAuth(await aiohttp_client(create_app(cfg)), cfg)
    tag = uuid.uuid4().hex[:10]
    idp = LoopbackIdp(audience=cfg.issuer, resource=cfg.mcp_resource,
                  issuer=f"https://idp-{tag}.example.test")  # fmt: skip
    server = await aiohttp_server(idp.app())
    domain = f"corp-{tag}.test"
    account = await seed_account(oauth.pool, workspaces=3)
    email = f"Pat.{tag}@{domain}"
    await oauth.pool.execute("UPDATE accounts SET email = $1 WHERE id = $2", email,
                             uuid.UUID(account.id))  # fmt: skip
    account.email = email
    person = f"00u{tag}"
    idp.people[person] = email.lower()
    reg = await oauth.register(
        token_endpoint_auth_method="client_secret_basic",
        grant_types=["authorization_code", "refresh_token", JWT_BEARER],
    )
    url = str(server.make_url("")).rstrip("/")
    return Enterprise(oauth, idp, url, domain, reg.client_id, reg.body["client_secret"],
                      person, account, audit_file)  # fmt: skip
