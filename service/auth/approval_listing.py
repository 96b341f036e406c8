"""An account's active approvals as someone reviewing them reads them (`approve --list`).

Each approval: its client (id, name, how it registered), scopes, the workspaces it reads
(names and ids), when it was created and last granted, when it expires, and when it was last
used, and its tool calls of the last 24 hours and 7 days. "Last used" is the newest of the
`LAST_USE` instants the database records: a refresh token's exchange, or the newest tool call
the replicas have flushed to `approval_activity` (service/auth/activity.py, flushed about
once a second).
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from service.auth.activity import read_approval_activity
from service.auth.clients.names import shown_client_name
from service.rules.shaping import format_instant

# One SQL expression a source, each the newest instant it knows for approval `a` (or null).
LAST_USE: tuple[str, ...] = (
    "(SELECT max(r.used_at) FROM refresh_tokens r WHERE r.approval_id = a.id)",
    "(SELECT max(t.last_call_at) FROM approval_activity t WHERE t.approval_id = a.id)",
)

_ACTIVE = f"""
SELECT a.id, a.client_id, c.client_name, c.kind, a.scopes, a.created_at, a.updated_at,
       a.idp_issuer,
       a.expires_at, ws.ids AS workspace_ids, ws.names AS workspace_names,
       GREATEST({", ".join(LAST_USE)}) AS last_used_at
  FROM approvals a
  JOIN oauth_clients c USING (client_id)
 CROSS JOIN LATERAL (
       SELECT coalesce(array_agg(w.id ORDER BY w.name, w.id), '{{}}') AS ids,
              coalesce(array_agg(w.name ORDER BY w.name, w.id), '{{}}') AS names
         FROM approval_workspaces aw JOIN workspaces w ON w.id = aw.workspace_id
        WHERE aw.approval_id = a.id) ws
 WHERE a.account_id = $1 AND a.revoked_at IS NULL AND a.expires_at > now()
 ORDER BY a.updated_at DESC, a.id
"""


def _instant(value: Any) -> str | None:
    return None if value is None else format_instant(value)


async def list_active_approvals(
    conn: asyncpg.Connection, account_id: uuid.UUID
) -> list[dict[str, Any]]:
    """The account's unrevoked, unexpired approvals, the most recently renewed first."""
    rows = await conn.fetch(_ACTIVE, account_id)
    activity = await read_approval_activity(conn, [r["id"] for r in rows])
    listed = [
        {
            "approvalId": str(r["id"]),
            "clientId": r["client_id"],
            "clientName": shown_client_name(r["client_name"]),
            "registration": r["kind"],  # operator (approve), dynamic (RFC 7591) or metadata (CIMD)
            "scope": " ".join(r["scopes"]),
            "workspaces": [
                {"id": str(i), "name": n}
                for i, n in zip(r["workspace_ids"], r["workspace_names"], strict=True)
            ],
            "createdAt": _instant(r["created_at"]),
            "approvedAt": _instant(r["updated_at"]),  # granted or last renewed
            "expiresAt": _instant(r["expires_at"]),
            "lastUsedAt": _instant(r["last_used_at"]),
            "calls": {
                t.tool: {"last24h": t.last_day, "last7d": t.last_week}
                for t in activity[r["id"]].tools
            },
        }
        for r in rows
    ]
    for item, r in zip(listed, rows, strict=True):
        if r["idp_issuer"] is not None:  # granted through a trusted IdP (`elova-mcp idp`)
            item["idpIssuer"] = r["idp_issuer"]
    return listed
