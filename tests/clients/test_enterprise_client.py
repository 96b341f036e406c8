"""The TypeScript client 2.4.0 (@modelcontextprotocol/client) in the Enterprise-Managed
Authorization flow, end to end: `CrossAppAccessProvider` discovers Elova's resource and
authorization-server metadata, its assertion callback trades the person's ID token for an
ID-JAG at the test IdP (`requestJwtAuthorizationGrant`, RFC 8693), and presents it at
Elova's /token as a confidential client (client_secret_basic, with `resource`); the token
lists the tools and reads exactly the workspaces the IdP's policy covers. Elova is the real
app on a loopback port with its PostgreSQL and Redis; the IdP is tests/auth/enterprise/idp.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable

import pytest
from aiohttp.test_utils import TestServer

from service.app import create_app
from service.config import Config
from tests.auth.browser_flow import OAuth
from tests.auth.enterprise.conftest import JWT_BEARER, idp_cli
from tests.auth.enterprise.idp import LoopbackIdp
from tests.auth.flow import seed_account
from tests.auth.helpers import ClientFactory
from tests.clients.node import TS_DIR, run
from tests.support.server import free_port


@pytest.mark.slow
async def test_typescript_cross_app_access_provider_end_to_end(
    node_env: dict[str, str],
    aiohttp_client: ClientFactory,
    aiohttp_server: Callable[..., Awaitable[TestServer]],
    make_config: Callable[..., Config],
) -> None:
    port = free_port()
    cfg = make_config(PUBLIC_URL=f"http://127.0.0.1:{port}", OAUTH_CIMD_ALLOW_PRIVATE="true")
    elova = await aiohttp_server(create_app(cfg), port=port)
    oauth = OAuth(await aiohttp_client(elova), cfg)  # type: ignore[arg-type]
    tag = uuid.uuid4().hex[:10]
    domain = f"corp-{tag}.test"
    account = await seed_account(oauth.pool, workspaces=2)
    email = f"sam.{tag}@{domain}"
    await oauth.pool.execute("UPDATE accounts SET email = $1 WHERE id = $2", email,
                             uuid.UUID(account.id))  # fmt: skip
    reg = await oauth.register(
        token_endpoint_auth_method="client_secret_basic",
        grant_types=["authorization_code", JWT_BEARER],
    )
    idp = LoopbackIdp(audience=cfg.issuer, resource=cfg.mcp_resource,
                  issuer=f"https://idp-{tag}.example.test")  # fmt: skip
    idp.people["sam-id-token"] = email
    idp.clients["idp-side-client"] = reg.client_id
    idp_server = await aiohttp_server(idp.app())
    idp_url = str(idp_server.make_url("")).rstrip("/")
    allowed = account.workspaces[0]
    code, _, err = await idp_cli(
        cfg, "add", "--issuer", idp.issuer, "--jwks-uri", f"{idp_url}/jwks", "--domain", domain,
        "--client", reg.client_id, "--workspace", allowed,
    )  # fmt: skip
    assert code == 0, err

    done = await run(
        ["node", str(TS_DIR / "enterprise_v2.mjs"), cfg.mcp_resource],
        {
            **node_env,
            "ELOVA_CLIENT_ID": reg.client_id,
            "ELOVA_CLIENT_SECRET": reg.body["client_secret"],
            "ELOVA_ISSUER": cfg.issuer,
            "IDP_TOKEN_ENDPOINT": f"{idp_url}/token",
            "IDP_ID_TOKEN": "sam-id-token",
            "IDP_CLIENT_ID": "idp-side-client",
        },
    )
    assert done.returncode == 0, done.describe()
    out = json.loads(done.stdout)
    # the client asked the IdP for an ID-JAG naming our authorization server and resource
    assert [a["resourceUrl"].rstrip("/") for a in out["asked"]] == [cfg.mcp_resource]
    exchange = idp.exchanges[0]
    assert exchange["requested_token_type"] == "urn:ietf:params:oauth:token-type:id-jag"
    assert exchange["audience"].rstrip("/") == cfg.issuer
    # an access token only: the IdP stays the point of control
    assert out["tokenType"].lower() == "bearer" and out["refreshToken"] is None
    assert "get_many_workspaces" in out["tools"]
    listed = json.dumps(out["called"])
    assert out["called"].get("isError") is not True, listed
    assert allowed in listed and account.workspaces[1] not in listed
