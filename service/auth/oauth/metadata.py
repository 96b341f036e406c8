"""RFC 8414 authorization-server metadata at /.well-known/oauth-authorization-server.

The issuer is the public URL without a path, so the well-known path has no suffix. Every
endpoint is named; only what the server really does is advertised (public clients and
client-secret clients, Client ID Metadata Documents, S256, the code flow, the JWT bearer
grant of an ID-JAG, `iss` in authorization responses unless ELOVA_OAUTH_ADVERTISE_ISS_PARAMETER
is false).
"""

from __future__ import annotations

from typing import Any

from aiohttp import hdrs, web

from service.app_keys import CONFIG
from service.auth.caller import ALL_SCOPES
from service.config import Config
from service.edge.paths import AUTHORIZE_PATH, JWKS_PATH, REGISTER_PATH, REVOKE_PATH, TOKEN_PATH

# The client authentication methods registration accepts (kept here, below registration,
# so the metadata does not import the endpoint modules).
AUTH_METHODS = ("none", "client_secret_post", "client_secret_basic")
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ID_JAG_PROFILE = "urn:ietf:params:oauth:grant-profile:id-jag"

_PUBLIC_HEADERS = {hdrs.CACHE_CONTROL: "public, max-age=300", hdrs.ACCESS_CONTROL_ALLOW_ORIGIN: "*"}


def authorization_server_metadata(cfg: Config) -> dict[str, Any]:
    base = cfg.issuer
    body: dict[str, Any] = {
        "issuer": base,
        "authorization_endpoint": base + AUTHORIZE_PATH,
        "token_endpoint": base + TOKEN_PATH,
        "registration_endpoint": base + REGISTER_PATH,
        "revocation_endpoint": base + REVOKE_PATH,
        "jwks_uri": base + JWKS_PATH,
        "scopes_supported": list(ALL_SCOPES),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token", JWT_BEARER],
        "token_endpoint_auth_methods_supported": list(AUTH_METHODS),
        "revocation_endpoint_auth_methods_supported": list(AUTH_METHODS),
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": True,
        "client_id_metadata_document_supported": True,
        "authorization_grant_profiles_supported": [ID_JAG_PROFILE],
    }
    if not cfg.oauth_advertise_iss_parameter:
        del body["authorization_response_iss_parameter_supported"]
    return body


async def serve_metadata(request: web.Request) -> web.Response:
    body = authorization_server_metadata(request.app[CONFIG])
    return web.json_response(body, headers=_PUBLIC_HEADERS)
