"""The approval page: what the client will read, and the account's decision.

`show` renders the consent form (the client, where it will send the browser, the account's
workspaces to choose from, the requested scopes, the expiry, the personal-information
notice); `decide` handles its POST: it re-validates the request, the session and the CSRF
token, grants through `grant_approval` (which enforces every bound on the server) and
redirects to the client with a one-time code. The page has no script: "Select all" and
"Clear" are submit buttons. What it shows, its bounds and why: docs/decisions/oauth.md, "The
approval page", and docs/decisions/ux.md, "The pages people see (sign-in, approval,
approvals, sign-out, errors)".
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlsplit

import asyncpg
from aiohttp import web

from service.app_keys import CONFIG, DB_POOL, METADATA_CLIENTS
from service.audit import oauth_events as audit
from service.auth.approvals import (
    EXPIRY_CHOICES,
    MAX_ACTIVE_APPROVALS,
    MAX_WORKSPACES,
    Approval,
    grant_approval,
)
from service.auth.caller import N8N_READ, WORKSPACES_READ
from service.auth.clients.names import shown_client_name
from service.auth.clients.redirect_hosts import ShownHost, shown_host, split_authority
from service.auth.clients.registry import (
    Client,
    is_app_scheme,
    is_loopback_host,
    redirect_host,
    redirect_origin,
)
from service.auth.clients.retention import mark_authorized
from service.auth.oauth.authorization_requests import (
    AuthorizationRequest,
    parse_authorization_request,
    redirect_to,
    refusal_location,
)
from service.auth.oauth.codes import issue_code
from service.auth.pages.rendering import error_page, read_form, render, see_other, unreadable_form
from service.auth.pages.signin import signin_location
from service.auth.pages.signin_sessions import SignedIn, csrf_matches, current_session
from service.edge.paths import APPROVALS_PATH, AUTHORIZE_PATH
from service.errors import (
    ApprovalLimitReached,
    ApprovalRefused,
    ClientGone,
    FieldRefused,
    PageRefusal,
    RedirectRefusal,
)

LISTED_WORKSPACES = 200
MAX_NAME_SHOWN = 200
DEFAULT_EXPIRY = "7d"
SCOPE_TEXT = {
    WORKSPACES_READ: "See the chosen workspaces: names, your role and time zones.",
    N8N_READ: "Read n8n metadata of the chosen workspaces: instances, sync jobs, workflows,"
    " executions with their error text, and execution statistics.",
}
EXPIRY_TEXT = {"1d": "1 day", "7d": "7 days", "30d": "30 days"}
EXPIRED_CLIENT = (
    "Its registration was removed because it was never used. Start the connection again "
    "from the application; it will register again."
)
CAP_MESSAGE = (
    f"Your account already has {MAX_ACTIVE_APPROVALS} active approvals, the most allowed. "
    "Revoke one you no longer need on the Approvals page, then approve this application."
)

_WORKSPACES = """
    SELECT w.id, w.name, w.time_zone, m.role, count(*) OVER () AS total
      FROM memberships m JOIN workspaces w ON w.id = m.workspace_id
     WHERE m.account_id = $1
     ORDER BY w.name, w.id
     LIMIT $2
"""
_SITUATION = """
    SELECT (SELECT count(*) FROM approvals
             WHERE account_id = $1 AND client_id <> $2
               AND revoked_at IS NULL AND expires_at > now()) AS active_elsewhere,
           (SELECT array_agg(aw.workspace_id) FROM approvals a
              JOIN approval_workspaces aw ON aw.approval_id = a.id
             WHERE a.account_id = $1 AND a.client_id = $2
               AND a.revoked_at IS NULL AND a.expires_at > now()) AS approved_before
"""


async def show(
    request: web.Request,
    req: AuthorizationRequest,
    session: SignedIn,
    *,
    error: str | None = None,
    error_field: str | None = None,
    status: int = 200,
    chosen: dict[str, Any] | None = None,
    select: str | None = None,
) -> web.Response:
    """The approval page; `error_field` (workspaces, scopes, expires) puts the error next to
    that choice; `select` ("all" or "none") re-ticks the workspaces as those buttons ask."""
    pool = request.app[DB_POOL]
    rows = await pool.fetch(_WORKSPACES, session.account_id, LISTED_WORKSPACES)
    situation = await pool.fetchrow(_SITUATION, session.account_id, req.client.client_id)
    before = {str(w) for w in situation["approved_before"] or ()}
    if chosen is not None:
        checked_workspaces, checked_scopes = chosen["workspaces"], chosen["scopes"]
        expiry = chosen["expires"]
    else:
        only = {str(rows[0]["id"])} if len(rows) == 1 else set()
        checked_workspaces, checked_scopes, expiry = before or only, set(req.scopes), DEFAULT_EXPIRY
    listed = [str(r["id"]) for r in rows]
    select_note = None
    if select == "all":
        checked_workspaces = select_all(listed, checked_workspaces)
        if len(listed) > MAX_WORKSPACES:
            select_note = f"{MAX_WORKSPACES} workspaces chosen, the most an approval can include."
    elif select == "none":
        checked_workspaces = []
    checked = set(checked_workspaces)
    target = urlsplit(req.redirect_uri)
    context = {
        "client_name": shown_client_name(req.client.client_name),
        "client_host": client_host(req.client, req.redirect_uri),
        "client_by_document": req.client.kind == "metadata",
        "redirect_host": redirect_host(req.redirect_uri),
        "loopback": target.scheme == "http" and is_loopback_host(target.hostname or ""),
        "app_scheme": is_app_scheme(req.redirect_uri),
        "account": session,
        "workspaces": [
            {
                "id": str(r["id"]),
                "name": r["name"][:MAX_NAME_SHOWN],
                "role": r["role"],
                "time_zone": r["time_zone"],
                "checked": str(r["id"]) in checked,
            }
            for r in rows
        ],
        "total_workspaces": rows[0]["total"] if rows else 0,
        "checked_count": sum(1 for w in listed if w in checked),
        "select_note": select_note,
        "listed_limit": LISTED_WORKSPACES,
        "max_workspaces": MAX_WORKSPACES,
        "scopes": [
            {"name": s, "text": SCOPE_TEXT[s], "checked": s in checked_scopes} for s in req.scopes
        ],
        "expiries": [
            {"value": v, "text": EXPIRY_TEXT[v], "checked": v == expiry} for v in EXPIRY_CHOICES
        ],
        "hidden": req.hidden_fields(),
        "csrf": session.csrf_token,
        "approved_before": bool(before),
        "at_cap": situation["active_elsewhere"] >= MAX_ACTIVE_APPROVALS,
        "cap_message": CAP_MESSAGE,
        "approvals_path": APPROVALS_PATH,
        "action": AUTHORIZE_PATH,
        "error": error,
        "error_field": error_field,
    }
    return render(
        request, "approve.html", context, status=status,
        form_targets=[redirect_origin(req.redirect_uri)],
    )  # fmt: skip


def select_all(listed: list[str], checked: Any) -> list[str]:
    """What "Select all" ticks: the ticked workspaces (in list order), then the next listed
    ones, up to the most an approval can include."""
    ticked = set(checked)
    chosen = [w for w in listed if w in ticked][:MAX_WORKSPACES]
    for w in listed:
        if len(chosen) >= MAX_WORKSPACES:
            break
        if w not in ticked:
            chosen.append(w)
    return chosen


def client_host(client: Client, redirect_uri: str) -> ShownHost:
    """The host name a person should recognise: the metadata document's host for a client
    known by its document (the one thing about it a third party cannot fake), else where the
    browser is sent back to; both shown as service/auth/clients/redirect_hosts.py says."""
    if client.kind == "metadata":
        parts = urlsplit(client.client_id)
        try:
            return shown_host(split_authority(parts.netloc)[0])
        except ValueError:
            return ShownHost(ascii(parts.netloc))
    return redirect_host(redirect_uri)


def _choices(form: Any) -> dict[str, Any]:
    return {
        "workspaces": [w for w in form.getall("workspace", []) if isinstance(w, str)],
        "scopes": {s for s in form.getall("grant_scope", []) if isinstance(s, str)},
        "expires": form.get("expires") if isinstance(form.get("expires"), str) else DEFAULT_EXPIRY,
    }


def _workspace_ids(raw: list[str]) -> list[uuid.UUID]:
    if not raw:
        raise FieldRefused("workspaces", "Choose at least one workspace.")
    count = len(set(raw))
    if count > MAX_WORKSPACES:
        raise FieldRefused(
            "workspaces",
            f"An approval can include at most {MAX_WORKSPACES} workspaces, not {count}."
            " Untick some of them.",
        )
    try:
        return [uuid.UUID(w) for w in raw]
    except ValueError:
        raise FieldRefused("workspaces", "One of the chosen workspaces does not exist.") from None


def _check_choices(req: AuthorizationRequest, chosen: dict[str, Any]) -> list[uuid.UUID]:
    """The chosen workspace ids, or the refusal of the first choice that cannot be granted
    (in the page's order: workspaces, permissions, expiry)."""
    workspace_ids = _workspace_ids(chosen["workspaces"])
    unasked = chosen["scopes"] - set(req.scopes)
    if unasked:
        raise FieldRefused(
            "scopes", f"The application did not ask for {', '.join(sorted(unasked))}."
        )
    if not chosen["scopes"]:
        raise FieldRefused("scopes", "Choose at least one permission.")
    if chosen["expires"] not in EXPIRY_CHOICES:
        shown = str(chosen["expires"])[:20]
        raise FieldRefused(
            "expires", f"An expiry of {shown!r} is not offered; choose 1 day, 7 days or 30 days."
        )
    return workspace_ids


async def decide(request: web.Request) -> web.Response:
    """POST /authorize: approve (grant + code) or deny, back to the client either way."""
    cfg, pool = request.app[CONFIG], request.app[DB_POOL]
    form = await read_form(request)
    if form is None:
        return unreadable_form(request)
    try:
        req = await parse_authorization_request(request.app, form)
    except PageRefusal as err:
        return error_page(request, err.title, err.message, status=400)
    except RedirectRefusal as err:
        return see_other(
            refusal_location(err, cfg.issuer), form_targets=[redirect_origin(err.redirect_uri)]
        )
    targets = [redirect_origin(req.redirect_uri)]
    session = await current_session(request)
    if session is None:
        return see_other(signin_location(f"{AUTHORIZE_PATH}?{req.query()}"))
    chosen = _choices(form)
    if not csrf_matches(session.csrf_token, form.get("csrf")):
        return await show(
            request, req, session, chosen=chosen, status=403,
            error="This form expired or did not come from this page. Review it and try again.",
        )  # fmt: skip
    decision = form.get("decision")
    if decision == "deny":
        denied = {"error": "access_denied", "error_description": "the account declined"}
        return see_other(redirect_to(req.redirect_uri, denied, req.state, cfg.issuer),
                         form_targets=targets)  # fmt: skip
    if decision in ("select_all", "select_none"):
        select = "all" if decision == "select_all" else "none"
        return await show(request, req, session, chosen=chosen, select=select)
    if decision != "approve":
        return await show(request, req, session, chosen=chosen, status=400,
                          error="Choose Approve or Deny.")  # fmt: skip
    try:
        code, granted = await _grant(pool, req, session, chosen)
    except ClientGone:
        request.app[METADATA_CLIENTS].forget(req.client.client_id)
        return error_page(request, "This application is no longer registered", EXPIRED_CLIENT)
    except ApprovalLimitReached:
        return await show(request, req, session, chosen=chosen, status=409, error=CAP_MESSAGE)
    except ApprovalRefused as err:
        # grant_approval's own refusals about workspaces: not a member (a forged form)
        field = getattr(err, "field", "workspaces" if "workspace" in err.message else None)
        return await show(request, req, session, chosen=chosen, status=400,
                          error=_sentence(err), error_field=field)  # fmt: skip
    await audit.consent_granted(
        request, session.account_id, granted.id, granted.client_id, granted.workspace_ids,
        granted.scopes,
    )  # fmt: skip
    location = redirect_to(req.redirect_uri, {"code": code}, req.state, cfg.issuer)
    return see_other(location, form_targets=targets)


async def _grant(
    pool: asyncpg.Pool, req: AuthorizationRequest, session: SignedIn, chosen: dict[str, Any]
) -> tuple[str, Approval]:
    """The approval as chosen and its code, in one transaction that first marks the client
    as authorized (ClientGone when the retention sweep deleted it meanwhile)."""
    workspace_ids = _check_choices(req, chosen)
    async with pool.acquire() as conn, conn.transaction():
        if not await mark_authorized(conn, req.client.client_id):
            raise ClientGone
        granted = await grant_approval(
            conn,
            account_id=session.account_id,
            client_id=req.client.client_id,
            workspace_ids=workspace_ids,
            scopes=chosen["scopes"],
            expires=chosen["expires"],
        )
        return await issue_code(conn, req, granted), granted


def _sentence(err: ApprovalRefused) -> str:
    text = err.message
    text = text[:1].upper() + text[1:]
    return text if text.endswith(".") else text + "."
