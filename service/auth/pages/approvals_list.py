"""/approvals: the signed-in account's active approvals, what each client has been doing
(service.auth.activity), and revoking one after a confirmation.

Revoking takes two steps that work without JavaScript: the list links to a confirmation
page (`confirm_revoke`, GET /approvals/revoke?approval=ID) whose CSRF-protected form posts
the revocation (`revoke`); only the account's own approvals can be revoked. What the page
shows and why a page of its own: docs/decisions/ux.md, "The pages people see (sign-in,
approval, approvals, sign-out, errors)"; revocation: docs/decisions/oauth.md, "/approvals".
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg
from aiohttp import web

from service.app_keys import DB_POOL
from service.audit.oauth_events import approval_revoked
from service.auth.activity import flush_now, read_approval_activity
from service.auth.approvals import MAX_ACTIVE_APPROVALS, revoke_approval
from service.auth.clients.names import shown_client_name
from service.auth.clients.registry import redirect_host
from service.auth.pages.rendering import error_page, render, see_other
from service.auth.pages.signin import session_form, signin_location
from service.auth.pages.signin_sessions import SignedIn, current_session
from service.edge.paths import APPROVALS_PATH, APPROVALS_REVOKE_PATH, SIGNOUT_PATH

DATE_FORMAT = "%Y-%m-%d %H:%M UTC"
FOLDED_AFTER = 8  # workspace names shown before "Show all"

# How a client came to be registered, from what its row holds.
REGISTERED_BY_METADATA = "Client ID Metadata Document"
REGISTERED_BY_OPERATOR = "Created by the operator (elova-mcp approve)"
REGISTERED_DYNAMICALLY = "Dynamic client registration"

_LIST = """
    SELECT a.id, a.client_id, c.client_name, c.kind, c.redirect_uris, a.scopes,
           a.created_at, a.expires_at, a.idp_issuer,
           coalesce((SELECT array_agg(w.name ORDER BY w.name, w.id)
                       FROM approval_workspaces aw
                       JOIN workspaces w ON w.id = aw.workspace_id
                      WHERE aw.approval_id = a.id), '{}') AS workspace_names
      FROM approvals a JOIN oauth_clients c USING (client_id)
     WHERE a.account_id = $1 AND a.revoked_at IS NULL AND a.expires_at > now()
       AND ($2::uuid IS NULL OR a.id = $2)
     ORDER BY a.updated_at DESC, a.id
"""


def registered_by(client_id: str, kind: str) -> str:
    """How the client registered: a client_id that is an https URL names its Client ID
    Metadata Document; the operator's clients come from `elova-mcp approve`; the rest
    registered themselves (RFC 7591)."""
    if client_id.startswith("https://"):
        return REGISTERED_BY_METADATA
    if kind == "operator":
        return REGISTERED_BY_OPERATOR
    return REGISTERED_DYNAMICALLY


def client_hosts(client_id: str, redirect_uris: list[str]) -> list[str]:
    """Where the client lives: its metadata document's host, else its redirect URIs' hosts
    (none for an operator client)."""
    if client_id.startswith("https://"):
        return [redirect_host(client_id).text]
    return sorted({redirect_host(u).text for u in redirect_uris})


def _date(instant: datetime | None) -> dict[str, str] | None:
    if instant is None:
        return None
    return {"text": instant.strftime(DATE_FORMAT), "iso": instant.isoformat()}


async def _approvals(
    pool: asyncpg.Pool, account_id: uuid.UUID, only: uuid.UUID | None = None
) -> list[dict[str, Any]]:
    rows = await pool.fetch(_LIST, account_id, only)
    activity = await read_approval_activity(pool, [r["id"] for r in rows])
    listed = []
    for r in rows:
        seen = activity[r["id"]]
        listed.append(
            {
                "id": str(r["id"]),
                "client_name": shown_client_name(r["client_name"]),
                "hosts": client_hosts(r["client_id"], list(r["redirect_uris"])),
                "registered_by": registered_by(r["client_id"], r["kind"]),
                "scopes": list(r["scopes"]),
                "idp": r["idp_issuer"],  # granted by the organization's IdP, or None
                "workspaces": list(r["workspace_names"]),
                "created": _date(r["created_at"]),
                "expires": _date(r["expires_at"]),
                "last_used": _date(seen.last_used),
                "tools": seen.tools,
                "day_total": sum(t.last_day for t in seen.tools),
                "week_total": sum(t.last_week for t in seen.tools),
            }
        )
    return listed


def _signed_in_context(session: SignedIn) -> dict[str, Any]:
    return {
        "account": session,
        "csrf": session.csrf_token,
        "signout_action": SIGNOUT_PATH,
        "folded_after": FOLDED_AFTER,
    }


async def approvals_page(request: web.Request) -> web.Response:
    """GET /approvals."""
    session = await current_session(request)
    if session is None:
        return see_other(signin_location(APPROVALS_PATH))
    await flush_now(request.app)  # this replica's latest calls, before reading them
    context = {
        **_signed_in_context(session),
        "approvals": await _approvals(request.app[DB_POOL], session.account_id),
        "max_active": MAX_ACTIVE_APPROVALS,
        "revoke_path": APPROVALS_REVOKE_PATH,
        "revoked": request.query.get("revoked") == "1",
    }
    return render(request, "approvals.html", context)


def _approval_id(raw: object) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(raw))
    except ValueError:
        return None


def _no_such_approval(request: web.Request) -> web.Response:
    return error_page(
        request,
        "No such approval",
        "That approval does not exist or is no longer active.",
        status=404,
        back=(APPROVALS_PATH, "Back to your approvals"),
    )


async def confirm_revoke(request: web.Request) -> web.Response:
    """GET /approvals/revoke?approval=ID: what revoking ends, and the button that does it."""
    session = await current_session(request)
    if session is None:
        return see_other(signin_location(APPROVALS_PATH))
    approval_id = _approval_id(request.query.get("approval", ""))
    found = (
        await _approvals(request.app[DB_POOL], session.account_id, approval_id)
        if approval_id is not None
        else []
    )
    if not found:
        return _no_such_approval(request)
    context = {
        **_signed_in_context(session),
        "approval": found[0],
        "revoke_action": APPROVALS_REVOKE_PATH,
        "approvals_path": APPROVALS_PATH,
    }
    return render(request, "revoke.html", context)


async def revoke(request: web.Request) -> web.Response:
    """POST /approvals/revoke (from the confirmation page). It takes effect on the client's
    next MCP call (the bearer check reads the approval every call) and at its next refresh."""
    got = await session_form(request, "Approvals page")
    if isinstance(got, web.Response):
        return got
    session, form = got
    approval_id = _approval_id(form.get("approval_id", ""))
    if approval_id is None:
        return _no_such_approval(request)
    pool = request.app[DB_POOL]
    async with pool.acquire() as conn, conn.transaction():
        mine = await conn.fetchval(
            "SELECT true FROM approvals WHERE id = $1 AND account_id = $2 FOR UPDATE",
            approval_id,
            session.account_id,
        )
        if mine:
            await revoke_approval(conn, approval_id, reason="user")
    if not mine:
        return _no_such_approval(request)
    await approval_revoked(request, session.account_id, approval_id)
    return see_other(f"{APPROVALS_PATH}?revoked=1")
