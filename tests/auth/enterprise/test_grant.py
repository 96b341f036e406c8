"""The JWT bearer grant of an ID-JAG (issue 55), black box: a test IdP on loopback, the real
app with its PostgreSQL and Redis, `elova-mcp idp` in a subprocess. The metadata; a valid
ID-JAG → an access token (no refresh token) that reads exactly the policy's workspaces;
each invalid claim refused with its error; the scope intersection; key rotation; `idp
remove` → 401; the approval on /approvals and the audit lines naming the issuer."""

from __future__ import annotations

import base64
import json
import time
import uuid
from typing import Any

import jwt
import pytest

from service.app_keys import AUDIT
from service.auth.tokens import GENERATION_CLAIM
from tests.audit.reading import audit_lines
from tests.auth.enterprise.conftest import JWT_BEARER, Enterprise, basic, idp_cli
from tests.auth.enterprise.idp import ID_JAG_TYPE, ed25519_key, rsa_key
from tests.auth.flow import bearer, tool_call


async def _ok(resp: Any) -> dict[str, Any]:
    assert resp.status == 200, await resp.text()
    assert resp.headers["Cache-Control"] == "no-store"
    body: dict[str, Any] = await resp.json()
    return body


async def _refused(resp: Any, error: str, status: int = 400) -> str:
    assert resp.status == status, await resp.text()
    body = await resp.json()
    assert body["error"] == error, body
    assert "\n" not in body["error_description"]
    return str(body["error_description"])


async def _call(e: Enterprise, token: str, name: str, arguments: dict[str, Any]) -> Any:
    body, headers = tool_call(name, arguments)
    return await e.oauth.http.post("/mcp", json=body, headers=bearer(headers, token))


async def test_metadata_advertises_the_grant_and_the_profile(enterprise: Enterprise) -> None:
    meta = await (await enterprise.oauth.http.get("/.well-known/oauth-authorization-server")).json()
    assert JWT_BEARER in meta["grant_types_supported"]
    assert meta["authorization_grant_profiles_supported"] == [
        "urn:ietf:params:oauth:grant-profile:id-jag"
    ]
    assert meta["authorization_response_iss_parameter_supported"] is True


async def test_the_iss_parameter_advertisement_is_a_setting(make_config: Any) -> None:
    from service.auth.oauth.metadata import authorization_server_metadata

    meta = authorization_server_metadata(make_config(OAUTH_ADVERTISE_ISS_PARAMETER="false"))
    assert "authorization_response_iss_parameter_supported" not in meta


async def test_registration_echoes_the_jwt_bearer_grant(enterprise: Enterprise) -> None:
    reg = await enterprise.oauth.register(grant_types=["authorization_code", JWT_BEARER])
    assert JWT_BEARER in reg.body["grant_types"]
    plain = await enterprise.oauth.register()
    assert plain.body["grant_types"] == ["authorization_code", "refresh_token"]


async def test_idp_add_list_remove_and_their_refusals(enterprise: Enterprise) -> None:
    e, cfg = enterprise, enterprise.oauth.cfg
    await e.trust("--expires", "7d")
    code, out, err = await idp_cli(cfg, "list", "--json")
    assert code == 0, err
    listed = [i for i in json.loads(out)["idps"] if i["issuer"] == e.idp.issuer]
    assert listed == [{"issuer": e.idp.issuer, "jwksUri": f"{e.idp_url}/jwks", "domain": e.domain,
                       "clients": [], "workspaces": [], "expires": "7d"}]  # fmt: skip
    code, out, _ = await idp_cli(cfg, "list")
    assert code == 0 and e.idp.issuer in out
    jwks = f"{e.idp_url}/jwks"
    for args, says in [
        (["add", "--issuer", e.idp.issuer, "--jwks-uri", jwks, "--domain", e.domain],
         "idp remove"),
        (["add", "--issuer", "http://idp.example", "--jwks-uri", jwks, "--domain", "a.test"],
         "https"),
        (["add", "--issuer", "https://x.example", "--jwks-uri", "http://idp.example/jwks",
          "--domain", "a.test"], "loopback"),
        (["add", "--issuer", "https://x.example", "--jwks-uri", jwks, "--domain", "not a domain"],
         "domain"),
        (["add", "--issuer", "https://x.example", "--jwks-uri", jwks, "--domain", "a.test",
          "--expires", "2d"], "1d, 7d or 30d"),
        (["add", "--issuer", "https://x.example", "--jwks-uri", jwks, "--domain", "a.test",
          "--workspace", "nope"], "UUID"),
        (["remove", "--issuer", "https://never.example"], "no trusted IdP"),
    ]:  # fmt: skip
        code, out, err = await idp_cli(cfg, *args)
        assert (code, out) == (2, ""), (args, err)
        assert len(err.strip().splitlines()) == 1 and says in err, err
    code, out, err = await idp_cli(cfg, "remove", "--issuer", e.idp.issuer)
    assert code == 0, err
    assert json.loads(out) == {"issuer": e.idp.issuer, "removed": True, "approvalsRevoked": 0}


async def test_a_valid_id_jag_gives_a_token_for_exactly_the_policys_workspaces(
    enterprise: Enterprise,
) -> None:
    e = enterprise
    allowed, other = e.account.workspaces[0], e.account.workspaces[1]
    await e.trust("--workspace", allowed, "--client", e.client_id)
    got = await _ok(await e.grant(e.id_jag()))
    assert "refresh_token" not in got
    assert got["token_type"] == "Bearer" and got["expires_in"] <= 300
    assert got["scope"] == "n8n:read workspaces:read"
    claims = jwt.decode(got["access_token"], options={"verify_signature": False})
    assert claims["aud"] == e.oauth.resource and claims["client_id"] == e.client_id
    token = got["access_token"]
    listed = await _call(e, token, "get_many_workspaces", {})
    assert listed.status == 200
    text = json.dumps(await listed.json())
    assert allowed in text and other not in text
    assert (await _call(e, token, "get_workspace", {"workspaceId": allowed})).status == 200
    refused = await _call(e, token, "get_workspace", {"workspaceId": other})
    answer = (await refused.json())["result"]
    assert answer["isError"] is True and answer["_meta"]["code"] == "NOT_FOUND"


async def test_rs256_and_the_email_binding(enterprise: Enterprise) -> None:
    e = enterprise
    e.idp.keys.insert(0, rsa_key())
    await e.trust()
    await _ok(await e.grant(e.id_jag()))
    # the binding decides from now on: a renamed email at the IdP keeps the account
    await _ok(await e.grant(e.id_jag(email="someone.else@" + e.domain)))
    # a subject not bound, with no usable email
    desc = await _refused(await e.grant(e.id_jag(sub="stranger", email=None)), "invalid_grant")
    assert "email" in desc


def _tampered(token: str) -> str:
    """The token with its payload's `sub` changed, its signature kept."""
    head, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["sub"] = "someone-else"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{head}.{forged}.{signature}"


def _now() -> int:
    return int(time.time())


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("signature", "signature"),
        ("typ", "typ"),
        ("alg_hs256", "signed with"),
        ("alg_none", "signed with"),
        ("aud", "aud"),
        ("aud_two", "aud"),
        ("resource", "resource"),
        ("exp", "expired"),
        ("iat", "future"),
        ("lifetime", "lifetime"),
        ("no_jti", "jti"),
        ("no_sub", "sub"),
        ("client", "another client"),
        ("issuer", "not a trusted IdP"),
        ("domain", "domain"),
        ("unverified", "verified email"),
        ("account", "no account"),
        ("unknown_scope", "does not define"),
        ("unknown_kid", "does not publish"),
    ],
)
async def test_each_invalid_claim_is_invalid_grant(
    enterprise: Enterprise, case: str, says: str
) -> None:
    e = enterprise
    await e.trust()
    stranger = f"x{uuid.uuid4().hex[:6]}"
    assertion = {
        "signature": lambda: _tampered(e.id_jag()),
        "typ": lambda: e.id_jag(header={"typ": "JWT"}),
        "alg_hs256": lambda: jwt.encode(
            {"iss": e.idp.issuer, "sub": e.person},
            "secret" * 8,
            algorithm="HS256",
            headers={"typ": "oauth-id-jag+jwt", "kid": e.idp.keys[0].kid},
        ),
        "alg_none": lambda: jwt.encode(
            {"iss": e.idp.issuer, "sub": e.person},
            None,  # type: ignore[arg-type]
            algorithm="none",
            headers={"typ": "oauth-id-jag+jwt", "kid": e.idp.keys[0].kid},
        ),
        "aud": lambda: e.id_jag(aud="https://elsewhere.example"),
        "aud_two": lambda: e.id_jag(aud=[e.oauth.cfg.issuer, "https://elsewhere.example"]),
        "resource": lambda: e.id_jag(resource="https://elsewhere.example/mcp"),
        "exp": lambda: e.id_jag(iat=_now() - 400, exp=_now() - 100),
        "iat": lambda: e.id_jag(iat=_now() + 200, exp=_now() + 400),
        "lifetime": lambda: e.id_jag(exp=_now() + 3600),
        "no_jti": lambda: e.id_jag(jti=None),
        "no_sub": lambda: e.id_jag(sub=None),
        "client": lambda: e.id_jag(client_id="another-client"),
        "issuer": lambda: e.id_jag(iss="https://unknown-idp.example"),
        "domain": lambda: e.id_jag(sub=stranger, email=f"pat@sub.{e.domain}", email_verified=True),
        "unverified": lambda: e.id_jag(sub=stranger, email=e.account.email, email_verified=False),
        "account": lambda: e.id_jag(sub=stranger, email=f"nobody@{e.domain}", email_verified=True),
        "unknown_scope": lambda: e.id_jag(scope="workspaces:read admin:write"),
        "unknown_kid": lambda: e.id_jag(key=ed25519_key()),
    }[case]()
    desc = await _refused(await e.grant(assertion), "invalid_grant")
    assert says in desc, desc
    assert assertion not in desc


async def test_a_replayed_jti_is_refused(enterprise: Enterprise) -> None:
    e = enterprise
    await e.trust()
    assertion = e.id_jag()
    await _ok(await e.grant(assertion))
    assert "already used" in await _refused(await e.grant(assertion), "invalid_grant")


async def test_client_authentication_and_client_policy(enterprise: Enterprise) -> None:
    e = enterprise
    await e.trust("--client", "some-other-client")
    resp = await e.oauth.http.post(
        "/token", data={"grant_type": JWT_BEARER, "assertion": e.id_jag(),
                        "client_id": e.client_id, "client_secret": "wrong"},
    )  # fmt: skip
    await _refused(resp, "invalid_client", 401)
    resp = await e.oauth.http.post(
        "/token", data={"grant_type": JWT_BEARER, "assertion": e.id_jag()},
        headers=basic(e.client_id, "wrong"),
    )  # fmt: skip
    await _refused(resp, "invalid_client", 401)
    assert resp.headers["WWW-Authenticate"].startswith("Basic")
    desc = await _refused(await e.grant(e.id_jag()), "invalid_grant")
    assert "not allowed" in desc


async def test_scopes_are_the_id_jags_within_the_request(enterprise: Enterprise) -> None:
    e = enterprise
    await e.trust()
    got = await _ok(await e.grant(e.id_jag(), scope="workspaces:read"))
    assert got["scope"] == "workspaces:read"
    got = await _ok(await e.grant(e.id_jag(scope="n8n:read"), scope="n8n:read workspaces:read"))
    assert got["scope"] == "n8n:read"
    await _refused(await e.grant(e.id_jag(scope="n8n:read"), scope="workspaces:read"),
                   "invalid_scope")  # fmt: skip


async def test_a_rotated_key_is_accepted_and_a_dropped_one_refused(enterprise: Enterprise) -> None:
    e = enterprise
    await e.trust()
    old = e.idp.keys[0]
    await _ok(await e.grant(e.id_jag()))
    new = rsa_key()
    e.idp.keys = [new]
    await _ok(await e.grant(e.id_jag(key=new)))  # unknown kid → refetched
    desc = await _refused(await e.grant(e.id_jag(key=old)), "invalid_grant")
    assert "does not publish" in desc


async def test_the_refetch_is_bounded_per_issuer(
    enterprise: Enterprise, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.auth.enterprise import jwks

    monkeypatch.setattr(jwks, "REFETCH_SECONDS", 60.0)
    e = enterprise
    await e.trust()
    await _ok(await e.grant(e.id_jag()))
    fetched = e.idp.jwks_fetches
    for _ in range(3):
        await _refused(await e.grant(e.id_jag(key=ed25519_key())), "invalid_grant")
    assert e.idp.jwks_fetches == fetched


async def test_renewal_keeps_the_generation_and_idp_remove_revokes(
    enterprise: Enterprise,
) -> None:
    e = enterprise
    await e.trust()
    first = await _ok(await e.grant(e.id_jag()))
    replayed = e.id_jag()
    second = await _ok(await e.grant(replayed))
    await _refused(await e.grant(replayed), "invalid_grant")
    generations = {
        jwt.decode(t["access_token"], options={"verify_signature": False})[GENERATION_CLAIM]
        for t in (first, second)
    }
    assert len(generations) == 1  # a renewal changing nothing keeps the generation
    ws = e.account.workspaces[0]
    assert (
        await _call(e, first["access_token"], "get_workspace", {"workspaceId": ws})
    ).status == 200
    # the approval is on the account's /approvals page, naming the IdP
    await e.oauth.signin(e.account)
    page = await (await e.oauth.http.get("/approvals")).text()
    assert e.idp.issuer in page
    sink = f"file:{e.audit_file}"
    code, out, err = await idp_cli(e.oauth.cfg, "remove", "--issuer", e.idp.issuer, sink=sink)
    assert code == 0, err
    assert json.loads(out)["approvalsRevoked"] == 1
    started = time.monotonic()
    while True:
        status = (
            await _call(e, second["access_token"], "get_workspace", {"workspaceId": ws})
        ).status
        if status == 401 or time.monotonic() - started > 20:
            break
    assert status == 401
    await _refused(await e.grant(e.id_jag()), "invalid_grant")
    await e.oauth.http.app[AUDIT].flushed()
    lines = audit_lines(e.audit_file.read_text())
    granted = [line for line in lines if line["type"] == "consent.granted"
               and line["target"].get("idp_issuer") == e.idp.issuer]  # fmt: skip
    assert granted and granted[0]["outcome"]["result"] == "success"
    refused = [line for line in granted if line["outcome"]["result"] == "failure"]
    assert refused[-1]["outcome"]["reason"] == "invalid_grant"
    revoked = [line for line in lines if line["type"] == "approval.revoked"
               and line["target"].get("idp_issuer") == e.idp.issuer]  # fmt: skip
    assert len(revoked) == 1
    text = e.audit_file.read_text()
    assert e.account.email.lower() not in text.lower()


async def test_the_token_exchange_of_the_test_idp(enterprise: Enterprise) -> None:
    """The IdP half of the flow a client drives: RFC 8693 exchange, then our /token."""
    e = enterprise
    await e.trust()
    server = e.oauth.http.session
    resp = await server.post(f"{e.idp_url}/token", data={
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "requested_token_type": ID_JAG_TYPE, "subject_token": e.person,
        "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
        "audience": e.oauth.cfg.issuer, "resource": e.oauth.resource, "client_id": e.client_id,
    })  # fmt: skip
    assert resp.status == 200
    exchanged = await resp.json()
    assert exchanged["issued_token_type"] == ID_JAG_TYPE
    await _ok(await e.grant(exchanged["access_token"]))


async def test_a_public_client_sends_its_client_id_alone(enterprise: Enterprise) -> None:
    e = enterprise
    await e.trust()
    public = await e.oauth.register(grant_types=["authorization_code", JWT_BEARER])
    form = {
        "grant_type": JWT_BEARER,
        "client_id": public.client_id,
        "assertion": e.id_jag(client_id=public.client_id),
        "resource": e.oauth.resource,
    }
    got = await _ok(await e.oauth.http.post("/token", data=form))
    assert "refresh_token" not in got
    # a client that did not register the grant may not use it
    plain = await e.oauth.register()
    form |= {"client_id": plain.client_id, "assertion": e.id_jag(client_id=plain.client_id)}
    await _refused(await e.oauth.http.post("/token", data=form), "unauthorized_client")
