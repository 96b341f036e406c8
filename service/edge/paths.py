"""The route paths this service serves: one definition each.

The MCP endpoint and its protected-resource metadata (RFC 9728), the authorization server
(RFC 8414 metadata, registration, sign-in, the approval page, token, revocation, JWKS), the
approvals page for people, the pages' stylesheet, the health probes, and /metrics (on its
own listener).
"""

from __future__ import annotations

MCP_PATH = "/mcp"
# RFC 9728: the resource metadata at the well-known path, and at that path with the
# resource's path appended (what the WWW-Authenticate challenge names).
RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource"
MCP_RESOURCE_METADATA_PATH = RESOURCE_METADATA_PATH + MCP_PATH

# The authorization server. The issuer has no path, so its metadata has no suffix.
OAUTH_METADATA_PATH = "/.well-known/oauth-authorization-server"
AUTHORIZE_PATH = "/authorize"
TOKEN_PATH = "/token"
REGISTER_PATH = "/register"
REVOKE_PATH = "/revoke"  # a token (RFC 7009)
JWKS_PATH = "/.well-known/jwks.json"
SIGNIN_PATH = "/signin"
SIGNOUT_PATH = "/signout"
APPROVALS_PATH = "/approvals"
APPROVALS_REVOKE_PATH = APPROVALS_PATH + "/revoke"  # an approval, by its owner
STYLESHEET_PATH = "/oauth/elova.css"

LIVEZ_PATH = "/livez"
READYZ_PATH = "/readyz"
METRICS_PATH = "/metrics"
