"""The audit lines of the authorization server and the approvals: sign-in succeeded or
failed, consent granted, code exchanged, token refreshed, refresh token reused (the family
revoked), approval revoked (the Approvals page, `elova-mcp approve --revoke`), client
registered (dynamic registration; a metadata document's client first stored).

Each is one call from the place the event happens, after its state change; nothing secret
is passed in (an account is its id, never its email).
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Iterable

from aiohttp import web

from service.audit.events import (
    APPROVAL_REVOKED,
    CLIENT_REGISTERED,
    CODE_EXCHANGED,
    CONSENT_GRANTED,
    REFRESH_REUSED,
    SIGNIN_FAILED,
    SIGNIN_SUCCEEDED,
    TOKEN_REFRESHED,
    Actor,
    AuditEvent,
    Outcome,
    Target,
    encode_line,
    event,
)
from service.audit.sinks import open_sink
from service.audit.trail import context_of, record
from service.audit.writer import AuditWriter
from service.config import Config
from service.errors import (
    CommandRefused,
    GrantRefused,
    OAuthError,
    RefreshReused,
    ScopeRefused,
)

SUCCESS = Outcome(result="success")


def _failure(status: int, reason: str) -> Outcome:
    return Outcome(result="failure", http_status=status, reason=reason)


async def signed_in(request: web.Request, account_id: uuid.UUID) -> None:
    actor = Actor(account_id=str(account_id))
    line = event(SIGNIN_SUCCEEDED, Outcome("success", 303), actor, context=context_of(request))
    await record(request.app, line)


async def signin_failed(request: web.Request, account_id: uuid.UUID | None, status: int) -> None:
    """`account_id`: the account the email names, None when it names none (never the
    email itself). 401: wrong credentials; 429: throttled."""
    reason = "throttled" if status == 429 else "invalid_credentials"
    actor = Actor(account_id=str(account_id) if account_id else None, confirmed=False)
    line = event(SIGNIN_FAILED, _failure(status, reason), actor, context=context_of(request))
    await record(request.app, line)


async def consent_granted(
    request: web.Request,
    account_id: uuid.UUID,
    approval_id: uuid.UUID,
    client_id: str,
    workspace_ids: Iterable[uuid.UUID],
    scopes: Iterable[str],
) -> None:
    actor = Actor(account_id=str(account_id), client_id=client_id, approval_id=str(approval_id))
    target = Target(
        workspace_ids=[str(w) for w in workspace_ids],
        scopes=sorted(scopes),
        client_id=client_id,
        approval_id=str(approval_id),
    )
    line = event(CONSENT_GRANTED, SUCCESS, actor, target=target, context=context_of(request))
    await record(request.app, line)


async def tokens_issued(
    request: web.Request, grant_type: str, client_id: str, approval_id: uuid.UUID,
    account_id: uuid.UUID | None, scope: str,
) -> None:  # fmt: skip
    """A code exchanged, or a refresh token rotated."""
    kind = CODE_EXCHANGED if grant_type == "authorization_code" else TOKEN_REFRESHED
    actor = Actor(
        account_id=str(account_id) if account_id else None,
        client_id=client_id,
        approval_id=str(approval_id),
    )
    target = Target(scopes=scope.split(), approval_id=str(approval_id), client_id=client_id)
    line = event(kind, Outcome("success", 200), actor, target=target, context=context_of(request))
    await record(request.app, line)


async def code_refused(request: web.Request, client_id: str, err: OAuthError) -> None:
    """A refused code exchange; a code used twice also revoked its approval (codes.py)."""
    reason = err.error + (": approval revoked" if "revoked for safety" in err.description else "")
    actor = Actor(client_id=client_id, confirmed=False)
    outcome = _failure(err.status, reason)
    line = event(CODE_EXCHANGED, outcome, actor, context=context_of(request))
    await record(request.app, line)


async def refresh_refused(
    request: web.Request, client_id: str, err: GrantRefused | ScopeRefused
) -> None:
    """A refused refresh: a reuse (which revoked the approval: its token family) is
    `refresh.reused`; the others are a failed `token.refreshed`."""
    if isinstance(err, RefreshReused):
        actor = Actor(client_id=client_id, approval_id=str(err.approval_id), confirmed=False)
        target = Target(approval_id=str(err.approval_id), client_id=client_id)
        outcome = _failure(400, "refresh_token_reused: approval revoked")
        line = event(REFRESH_REUSED, outcome, actor, target=target, context=context_of(request))
    else:
        actor = Actor(client_id=client_id, confirmed=False)
        outcome = _failure(400, err.error)
        line = event(TOKEN_REFRESHED, outcome, actor, context=context_of(request))
    await record(request.app, line)


async def approval_revoked(
    request: web.Request, account_id: uuid.UUID, approval_id: uuid.UUID
) -> None:
    """Revoked by its account, on the Approvals page."""
    actor = Actor(account_id=str(account_id), approval_id=str(approval_id))
    target = Target(approval_id=str(approval_id))
    outcome = Outcome("success", 303, reason="user")
    line = event(APPROVAL_REVOKED, outcome, actor, target=target, context=context_of(request))
    await record(request.app, line)


async def approval_revoked_by_client(
    request: web.Request, client_id: str, approval_id: uuid.UUID
) -> None:
    """Revoked by its client at /revoke (RFC 7009: one of its tokens, the whole family)."""
    actor = Actor(client_id=client_id, approval_id=str(approval_id), confirmed=False)
    target = Target(approval_id=str(approval_id), client_id=client_id)
    outcome = Outcome("success", 200, reason="client")
    line = event(APPROVAL_REVOKED, outcome, actor, target=target, context=context_of(request))
    await record(request.app, line)


async def approval_revoked_by_operator(cfg: Config, approval_id: uuid.UUID) -> None:
    """Revoked by `elova-mcp approve --revoke`."""
    line = event(
        APPROVAL_REVOKED,
        Outcome("success", reason="operator"),
        Actor(via="cli"),
        target=Target(approval_id=str(approval_id)),
    )
    await _write_from_command(cfg, line, f"approval {approval_id} is revoked")


async def consent_granted_by_operator(
    cfg: Config,
    account_id: uuid.UUID,
    approval_id: uuid.UUID,
    client_id: str,
    workspace_ids: Iterable[uuid.UUID],
    scope: str,
) -> None:
    """Granted by `elova-mcp approve` for an account (its tokens printed to the operator)."""
    actor = Actor(account_id=str(account_id), client_id=client_id, approval_id=str(approval_id),
                  via="cli")  # fmt: skip
    target = Target(
        workspace_ids=[str(w) for w in workspace_ids],
        scopes=sorted(scope.split()),
        client_id=client_id,
        approval_id=str(approval_id),
    )
    line = event(CONSENT_GRANTED, Outcome("success", reason="operator"), actor, target=target)
    await _write_from_command(cfg, line, f"approval {approval_id} is granted")


async def idp_granted(
    request: web.Request, account_id: uuid.UUID, approval_id: uuid.UUID, client_id: str,
    workspace_ids: Iterable[uuid.UUID], issuer: str, scope: str,
) -> None:  # fmt: skip
    """An approval made or renewed by an ID-JAG from a trusted IdP (its access token issued)."""
    actor = Actor(account_id=str(account_id), client_id=client_id, approval_id=str(approval_id))
    target = Target(
        workspace_ids=[str(w) for w in workspace_ids],
        scopes=sorted(scope.split()),
        client_id=client_id,
        approval_id=str(approval_id),
        idp_issuer=issuer,
    )
    outcome = Outcome("success", 200, reason="idp")
    line = event(CONSENT_GRANTED, outcome, actor, target=target, context=context_of(request))
    await record(request.app, line)


async def idp_grant_refused(
    request: web.Request, client_id: str, issuer: str | None, err: OAuthError
) -> None:
    """A refused ID-JAG grant: the error, the client and the IdP (null when the assertion
    names none we trust); never the assertion or its email."""
    actor = Actor(client_id=client_id, confirmed=False)
    target = Target(client_id=client_id, idp_issuer=issuer)
    line = event(CONSENT_GRANTED, _failure(err.status, err.error), actor, target=target,
                 context=context_of(request))  # fmt: skip
    await record(request.app, line)


async def approvals_revoked_by_idp_removal(
    cfg: Config, issuer: str, approval_ids: Iterable[uuid.UUID]
) -> None:
    """`elova-mcp idp remove`: one line for each approval granted through the IdP."""
    for approval_id in approval_ids:
        line = event(
            APPROVAL_REVOKED,
            Outcome("success", reason="operator"),
            Actor(approval_id=str(approval_id), via="cli"),
            target=Target(approval_id=str(approval_id), idp_issuer=issuer),
        )
        await _write_from_command(cfg, line, f"approval {approval_id} is revoked")


async def _write_from_command(cfg: Config, line: AuditEvent, done: str) -> None:
    """A command's line, written to the configured file or socket sink before the command
    answers. With the `stdout` sink it is one JSON line on stderr: a command's stdout is its
    one answer (scripts parse it), and stderr is what the pod's or Job's log collector keeps
    beside the service's stdout. A sink that stays unwritable for ELOVA_AUDIT_WAIT_SECONDS
    makes the command fail, saying what was done all the same."""
    if cfg.audit.sink == "stdout":
        sys.stderr.write(encode_line(line).decode("utf-8"))
        sys.stderr.flush()
        return
    sink = open_sink(cfg.audit)
    try:
        async with asyncio.timeout(cfg.audit.wait_seconds):
            while True:
                try:
                    await sink.write(encode_line(line))
                    return
                except OSError:
                    await asyncio.sleep(0.1)
    except TimeoutError:
        raise CommandRefused(
            f"{done}, but its audit line could not be written to the {cfg.audit.sink} sink"
            " (ELOVA_AUDIT_SINK)"
        ) from None
    finally:
        await sink.close()


async def client_registered(
    writer: AuditWriter | None, request: web.Request | None, client_id: str, kind: str
) -> None:
    """A client registered (`kind` dynamic), or a metadata document's client first stored
    (`kind` metadata: its client id is the document's URL)."""
    actor = Actor(client_id=client_id, confirmed=False)
    target = Target(client_id=client_id)
    outcome = Outcome("success", 201 if kind == "dynamic" else None, reason=kind)
    line = event(CLIENT_REGISTERED, outcome, actor, target=target, context=context_of(request))
    if writer is not None:
        await writer.record(line)
