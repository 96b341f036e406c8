"""/approvals: the signed-in account's active approvals, and revoking one.

Revoking takes effect on the client's next MCP call (the bearer check reads the approval
every call) and at its next refresh. Only the account's own approvals can be revoked; the
form is CSRF-protected like every form of a session.
"""

from __future__ import annotations

import uuid

from aiohttp import web

from service.auth.approvals import MAX_ACTIVE_APPROVALS, revoke_approval
from service.auth.oauth.clients import redirect_host
from service.auth.oauth.metadata import APPROVALS_PATH, SIGNOUT_PATH
from service.auth.oauth.pages import error_page, render, see_other
from service.auth.oauth.sessions import current_session
from service.auth.oauth.signin import session_form, signin_location
from service.keys import DB_POOL

REVOKE_PATH = APPROVALS_PATH + "/revoke"

_LIST = """
    SELECT a.id, c.client_name, c.redirect_uris, a.scopes, a.expires_at, a.updated_at,
           (SELECT count(*) FROM approval_workspaces aw WHERE aw.approval_id = a.id) AS workspaces
      FROM approvals a JOIN oauth_clients c USING (client_id)
     WHERE a.account_id = $1 AND a.revoked_at IS NULL AND a.expires_at > now()
     ORDER BY a.updated_at DESC, a.id
"""


async def approvals_page(request: web.Request) -> web.Response:
    """GET /approvals."""
    session = await current_session(request)
    if session is None:
        return see_other(signin_location(APPROVALS_PATH))
    rows = await request.app[DB_POOL].fetch(_LIST, session.account_id)
    approvals = [
        {
            "id": str(r["id"]),
            "client_name": r["client_name"],
            "hosts": sorted({redirect_host(u) for u in r["redirect_uris"]}),
            "scopes": list(r["scopes"]),
            "workspaces": r["workspaces"],
            "expires": r["expires_at"].strftime("%Y-%m-%d %H:%M UTC"),
            "updated": r["updated_at"].strftime("%Y-%m-%d %H:%M UTC"),
        }
        for r in rows
    ]
    context = {
        "account": session,
        "approvals": approvals,
        "max_active": MAX_ACTIVE_APPROVALS,
        "csrf": session.csrf_token,
        "revoke_action": REVOKE_PATH,
        "signout_action": SIGNOUT_PATH,
        "revoked": request.query.get("revoked") == "1",
    }
    return render(request, "approvals.html", context)


async def revoke(request: web.Request) -> web.Response:
    """POST /approvals/revoke."""
    got = await session_form(request, "Approvals page")
    if isinstance(got, web.Response):
        return got
    session, form = got
    try:
        approval_id = uuid.UUID(str(form.get("approval_id", "")))
    except ValueError:
        return error_page(request, "No such approval", "That approval does not exist.", status=404)
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
        return error_page(request, "No such approval", "That approval does not exist.", status=404)
    return see_other(f"{APPROVALS_PATH}?revoked=1")
