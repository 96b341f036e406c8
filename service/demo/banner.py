"""The text `make run` prints once the demo is ready: where the service is, the demo
account's tokens, how to get a new access token, and how to connect a client.

The exact, copy-pasteable commands matter more than brevity here: the reader has just run
one command and wants the next one. docs/connecting.md explains each client at length.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from service.demo.cast import DEMO_PASSWORD

MODERN_VERSION = "2026-07-28"


@dataclass(frozen=True)
class Banner:
    mcp_url: str
    base_url: str
    email: str
    workspace_ids: list[str]
    access_token: str
    refresh_token: str
    expires_in: int
    client_id: str
    approve_env: dict[str, str]
    database_note: str
    key_note: str
    shared_limits: bool
    loaded: str
    seconds: float


def approve_command(banner: Banner) -> str:
    """The `elova-mcp approve` call that renews the demo approval and prints new tokens."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in banner.approve_env.items())
    spaces = " ".join(f"--workspace {w}" for w in banner.workspace_ids)
    return (
        f"{env} \\\n    .venv/bin/elova-mcp approve --account {banner.email} "
        f"--client-id {shlex.quote(banner.client_id)} --expires 30d \\\n    {spaces}"
    )


def curl_command(mcp_url: str) -> str:
    """A stateless (2026-07-28) tools/call with curl; $ELOVA_TOKEN holds the access token."""
    body = (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_many_workspaces",'
        '"arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"'
        + MODERN_VERSION
        + '","io.modelcontextprotocol/clientCapabilities":{}}}}'
    )
    return (
        f"curl -s {mcp_url} \\\n"
        '    -H "Authorization: Bearer $ELOVA_TOKEN" \\\n'
        '    -H "Content-Type: application/json" \\\n'
        '    -H "Accept: application/json, text/event-stream" \\\n'
        f'    -H "MCP-Protocol-Version: {MODERN_VERSION}" -H "Mcp-Method: tools/call" '
        '-H "Mcp-Name: get_many_workspaces" \\\n'
        f"    -d '{body}'"
    )


def render(b: Banner) -> str:
    limits = (
        "shared through Redis (ELOVA_REDIS_URL)"
        if b.shared_limits
        else "per process (set ELOVA_REDIS_URL to share them between replicas)"
    )
    minutes = max(b.expires_in // 60, 1)
    lines = [
        "",
        "=" * 78,
        f"  Elova MCP demo is ready ({b.seconds:.1f} s): {b.loaded}",
        "=" * 78,
        "",
        f"  MCP endpoint    {b.mcp_url}",
        f"  Demo account    {b.email} (password {DEMO_PASSWORD}),"
        f" approved for {len(b.workspace_ids)} workspaces",
        f"  Database        {b.database_note}",
        f"  Signing key     {b.key_note}",
        f"  Limits          {limits}",
        "",
        f"  Access token (valid {minutes} minutes):",
        f"    export ELOVA_TOKEN={b.access_token}",
        "",
        "  Refresh (single use: each use returns a new pair; presenting a used refresh token",
        "  revokes the approval):",
        f"    curl -s -X POST {b.base_url}/token -d grant_type=refresh_token \\",
        f"      -d client_id={b.client_id} -d refresh_token={b.refresh_token}",
        "",
        "  A new access token at any time, while this runs (renews the demo approval, so",
        "  the tokens printed earlier stop working):",
        "    " + approve_command(b).replace("\n", "\n    "),
        "",
        "  Connect a client (details: docs/connecting.md):",
        "    Claude Code:",
        f"      claude mcp add --transport http elova {b.mcp_url} \\",
        '          --header "Authorization: Bearer $ELOVA_TOKEN"',
        "    MCP Inspector 2.x under Node 22 (web UI: Transport Streamable HTTP, the URL above,",
        "    header Authorization: Bearer <token>), or its CLI:",
        f"      npx @modelcontextprotocol/inspector@2 --cli {b.mcp_url} --transport http \\",
        '          --header "Authorization: Bearer $ELOVA_TOKEN" --method tools/list',
        "    Claude Desktop: through mcp-remote (see docs/connecting.md); custom connectors",
        "    need a public https ELOVA_PUBLIC_URL and sign in through OAuth as the demo account.",
        "    curl:",
        "      " + curl_command(b.mcp_url).replace("\n", "\n      "),
        "",
        "  Real clients get tokens through OAuth (sign in as the demo account on the approval",
        "  page); the tokens above are for trying things by hand. Ctrl-C stops the service.",
        "  Run `make run` again at any time: the demo data is refreshed, the key reused.",
        "",
    ]
    return "\n".join(lines) + "\n"
