"""One browser against the real app (create_app behind aiohttp's test client): a browser-like
HTTP session (cookies kept, redirects not followed) and the steps of the OAuth flow."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg
from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestClient

from service.app_keys import DB_POOL
from service.config import Config
from tests.auth.flow import (
    REDIRECT_URI,
    Account,
    Registered,
    authorize_params,
    hidden,
    pkce,
    query_of,
)


@dataclass
class OAuth:
    """One browser (the test client's cookie jar) and one app, with the flow's steps."""

    http: TestClient[web.Request, web.Application]
    cfg: Config

    @property
    def pool(self) -> asyncpg.Pool:
        return self.http.app[DB_POOL]

    @property
    def resource(self) -> str:
        return self.cfg.mcp_resource

    async def register(self, redirect_uris: list[str] | None = None, **extra: Any) -> Registered:
        body = {
            "redirect_uris": redirect_uris or [REDIRECT_URI],
            "client_name": "Test Agent",
            "grant_types": ["authorization_code", "refresh_token"],
            **extra,
        }
        resp = await self.http.post("/register", json=body)
        assert resp.status == 201, await resp.text()
        data = await resp.json()
        return Registered(data["client_id"], data["redirect_uris"][0], data)

    async def signin(self, account: Account, next_path: str = "/approvals") -> Any:
        page = await self.http.get("/signin", params={"next": next_path})
        assert page.status == 200
        fields = dict(hidden(await page.text()))
        return await self.http.post(
            "/signin",
            data={**fields, "email": account.email, "password": account.password},
            allow_redirects=False,
        )

    async def approval_page(self, params: dict[str, str]) -> tuple[ClientResponse, str]:
        resp = await self.http.get("/authorize", params=params, allow_redirects=False)
        return resp, await resp.text()

    async def decide(
        self,
        params: dict[str, str],
        *,
        workspaces: list[str],
        scopes: list[str] | None = None,
        expires: str = "7d",
        decision: str = "approve",
        csrf: str | None = "from-page",
    ) -> Any:
        """Load the approval page, then post its form with these choices."""
        resp, html = await self.approval_page(params)
        assert resp.status == 200, html
        fields = [(k, v) for k, v in hidden(html) if k != "csrf" or csrf == "from-page"]
        if csrf not in (None, "from-page"):
            fields.append(("csrf", csrf))
        fields += [("workspace", w) for w in workspaces]
        fields += [
            ("grant_scope", s) for s in (params["scope"].split() if scopes is None else scopes)
        ]
        fields += [("expires", expires), ("decision", decision)]
        return await self.http.post("/authorize", data=fields, allow_redirects=False)

    async def code_for(
        self,
        account: Account,
        reg: Registered | None = None,
        *,
        workspaces: list[str] | None = None,
        **over: str | None,
    ) -> dict[str, Any]:
        """Sign in, approve and return the code with everything needed to redeem it."""
        reg = reg or await self.register()
        verifier, challenge = pkce()
        params = authorize_params(reg, challenge, self.resource, **over)
        signed = await self.signin(account)
        assert signed.status == 303, await signed.text()
        resp = await self.decide(params, workspaces=workspaces or account.workspaces[:1])
        assert resp.status == 303, await resp.text()
        answer = query_of(resp.headers["Location"])
        assert answer.get("state") == params.get("state")
        return {"code": answer["code"], "verifier": verifier, "reg": reg, "params": params}

    async def token(self, **form: str) -> Any:
        return await self.http.post("/token", data=form)

    async def exchange(self, got: dict[str, Any], **over: str) -> Any:
        form = {
            "grant_type": "authorization_code",
            "code": got["code"],
            "redirect_uri": got["reg"].redirect_uri,
            "client_id": got["reg"].client_id,
            "code_verifier": got["verifier"],
            "resource": self.resource,
        }
        form.update(over)
        return await self.token(**form)

    async def refresh(self, got: dict[str, Any], refresh_token: str, **over: str) -> Any:
        """Trade a refresh token at /token as the client the code `got` was issued to."""
        form = {
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
            "client_id": got["reg"].client_id,
        }
        form.update(over)
        return await self.token(**form)
