"""A test identity provider on loopback: a JWKS endpoint, ID-JAGs signed with Ed25519 or
RS256, and an RFC 8693 token-exchange endpoint that trades a person's ID token (here: the
person's name at this IdP) for an ID-JAG naming our authorization server.

It is outside the product, as a company's IdP is: the service fetches its JWKS over HTTP on
127.0.0.1 (ELOVA_OAUTH_CIMD_ALLOW_PRIVATE) and never calls it otherwise.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

ISSUER = "https://idp.example.test"
ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"


@dataclass
class Key:
    kid: str
    alg: str
    private: Any

    def public_jwk(self) -> dict[str, Any]:
        algorithm = (
            jwt.algorithms.OKPAlgorithm if self.alg == "EdDSA" else jwt.algorithms.RSAAlgorithm
        )
        jwk = json.loads(algorithm.to_jwk(self.private.public_key()))
        return {**jwk, "kid": self.kid, "alg": self.alg, "use": "sig"}


def ed25519_key(kid: str | None = None) -> Key:
    return Key(kid or f"ed-{uuid.uuid4().hex[:8]}", "EdDSA", ed25519.Ed25519PrivateKey.generate())


def rsa_key(kid: str | None = None) -> Key:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return Key(kid or f"rsa-{uuid.uuid4().hex[:8]}", "RS256", private)


@dataclass
class LoopbackIdp:
    """The IdP's keys (the first signs), its people (subject → email), and its policy of
    which client gets which scopes."""

    audience: str
    resource: str
    keys: list[Key] = field(default_factory=lambda: [ed25519_key()])
    people: dict[str, str] = field(default_factory=dict)
    issuer: str = ISSUER
    jwks_fetches: int = 0
    # The AI clients registered at the IdP → their client id at the resource's server.
    clients: dict[str, str] = field(default_factory=dict)
    exchanges: list[dict[str, str]] = field(default_factory=list)

    def jwks(self) -> dict[str, Any]:
        return {"keys": [k.public_jwk() for k in self.keys]}

    def id_jag(
        self,
        *,
        sub: str,
        client_id: str,
        scope: str | None = "workspaces:read n8n:read",
        key: Key | None = None,
        header: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        now = int(time.time())
        body: dict[str, Any] = {
            "iss": self.issuer, "sub": sub, "aud": self.audience, "resource": self.resource,
            "client_id": client_id, "jti": uuid.uuid4().hex, "iat": now, "exp": now + 300,
        }  # fmt: skip
        if sub in self.people:
            body |= {"email": self.people[sub], "email_verified": True}
        if scope is not None:
            body["scope"] = scope
        body |= claims
        body = {k: v for k, v in body.items() if v is not None}
        signer = key or self.keys[0]
        head = {"typ": "oauth-id-jag+jwt", "kid": signer.kid, **(header or {})}
        return jwt.encode(body, signer.private, algorithm=signer.alg, headers=head)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/jwks", self._serve_jwks)
        app.router.add_post("/token", self._exchange)
        return app

    async def _serve_jwks(self, request: web.Request) -> web.Response:
        self.jwks_fetches += 1
        return web.json_response(self.jwks())

    async def _exchange(self, request: web.Request) -> web.Response:
        """RFC 8693 token exchange (the draft's §4.3): an ID token for an ID-JAG."""
        form = await request.post()
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        if form.get("requested_token_type") != ID_JAG_TYPE:
            return web.json_response({"error": "invalid_request"}, status=400)
        subject = str(form.get("subject_token", ""))
        if subject not in self.people:
            return web.json_response({"error": "invalid_grant"}, status=400)
        self.exchanges.append({k: str(v) for k, v in form.items() if k != "subject_token"})
        client_id = str(form.get("client_id") or "")
        scope = form.get("scope")
        assertion = self.id_jag(
            sub=subject, client_id=self.clients.get(client_id, client_id),
            scope=str(scope) if scope else "workspaces:read n8n:read",
            aud=str(form.get("audience") or self.audience),
            resource=str(form.get("resource") or self.resource),
        )  # fmt: skip
        return web.json_response(
            {"access_token": assertion, "issued_token_type": ID_JAG_TYPE,
             "token_type": "N_A", "expires_in": 300},
        )  # fmt: skip
