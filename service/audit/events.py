"""The audit event: what one line of the audit trail says, as msgspec Structs.

The shape is schema `elova.audit/1` (docs/audit/audit-event.v1.schema.json; the mapping onto
OCSF is in docs/operations.md, Audit trail). Every line names its schema, so a reader can
tell a line of another version, and an audit line from a request-log line on a shared
stdout. Nothing secret is ever a field: no token, code, password, cookie, client secret or
email; an account is its id, a call's arguments are a digest plus the few that identify
nobody (period, status, limit, time zone, lifecycle).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import msgspec

SCHEMA = "elova.audit/1"

# The event types, each with its OCSF class and activity (docs/operations.md).
TOOL_CALL = "tool.call"
SIGNIN_SUCCEEDED = "signin.succeeded"
SIGNIN_FAILED = "signin.failed"
CONSENT_GRANTED = "consent.granted"
CODE_EXCHANGED = "code.exchanged"
TOKEN_REFRESHED = "token.refreshed"
REFRESH_REUSED = "refresh.reused"
APPROVAL_REVOKED = "approval.revoked"
CLIENT_REGISTERED = "client.registered"

# type → (OCSF class_uid, activity_id)
OCSF_CLASSES: dict[str, tuple[int, int]] = {
    TOOL_CALL: (6003, 2),  # API Activity: Read
    SIGNIN_SUCCEEDED: (3002, 1),  # Authentication: Logon
    SIGNIN_FAILED: (3002, 1),
    CONSENT_GRANTED: (3003, 1),  # Authorize Session: Assign Privileges
    CODE_EXCHANGED: (3002, 4),  # Authentication: Service Ticket Request
    TOKEN_REFRESHED: (3002, 5),  # Authentication: Service Ticket Renew
    REFRESH_REUSED: (3002, 5),
    APPROVAL_REVOKED: (3001, 99),  # Account Change: Other
    CLIENT_REGISTERED: (6003, 1),  # API Activity: Create
}
EVENT_TYPES = tuple(OCSF_CLASSES)


class Actor(msgspec.Struct, forbid_unknown_fields=True):
    """Who acted (every field on every line; an id not known is null). `confirmed`: false
    when the ids come from a verified token whose approval was not (or no longer) confirmed,
    e.g. a call refused 401 for a revoked approval."""

    account_id: str | None = None
    client_id: str | None = None
    approval_id: str | None = None
    confirmed: bool = True
    via: str = "http"  # "http" (a request) or "cli" (an operator command)


class Target(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """What was acted on: the tool and the records a call names, an approval's workspaces
    and scopes, a registered client."""

    tool: str | None = None
    workspace_ids: list[str] = msgspec.field(default_factory=list)
    record_ids: dict[str, str] = msgspec.field(default_factory=dict)
    scopes: list[str] = msgspec.field(default_factory=list)
    client_id: str | None = None
    approval_id: str | None = None
    idp_issuer: str | None = None  # the trusted IdP an approval was granted through


class Arguments(msgspec.Struct, forbid_unknown_fields=True):
    """A call's arguments: `digest` (sha256 of their canonical JSON: sorted keys, no
    spaces) matches two identical calls without revealing values; `clear` keeps the ones
    that identify nobody."""

    digest: str
    clear: dict[str, Any] = msgspec.field(default_factory=dict)


class Outcome(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """The result, in the three layers of an answer (HTTP status, JSON-RPC error code,
    tool error code), and for OAuth events the reason of a failure."""

    result: str  # "success" | "failure"
    http_status: int | None = None
    jsonrpc_code: int | None = None
    tool_error: str | None = None
    reason: str | None = None


class Context(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """Where the event came from: request id (X-Request-Id), trace, client address."""

    request_id: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    client_address: str | None = None


class AuditEvent(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    schema: str
    time: str
    type: str
    ocsf_class_uid: int
    ocsf_activity_id: int
    outcome: Outcome
    actor: Actor
    target: Target = msgspec.field(default_factory=Target)
    arguments: Arguments | None = None
    context: Context = msgspec.field(default_factory=Context)


_encoder = msgspec.json.Encoder()
_canonical = msgspec.json.Encoder(order="sorted")


def now_rfc3339() -> str:
    """The current time, RFC 3339 UTC with milliseconds (…T22:11:56.123Z). Every tool call
    writes one: the text up to the second is formatted once a second, and the milliseconds
    come from a table (an f-string's `:03d` cost more than the rest of the function)."""
    global _second, _second_text
    milliseconds = time.time_ns() // 1_000_000
    second, fraction = divmod(milliseconds, 1000)
    if second != _second:
        _second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second = second
    return _second_text + _FRACTIONS[fraction]


_second, _second_text = -1, ""
_FRACTIONS = tuple(f".{fraction:03d}Z" for fraction in range(1000))


def event(
    kind: str,
    outcome: Outcome,
    actor: Actor,
    *,
    target: Target | None = None,
    arguments: Arguments | None = None,
    context: Context | None = None,
) -> AuditEvent:
    class_uid, activity_id = OCSF_CLASSES[kind]
    return AuditEvent(
        schema=SCHEMA,
        time=now_rfc3339(),
        type=kind,
        ocsf_class_uid=class_uid,
        ocsf_activity_id=activity_id,
        outcome=outcome,
        actor=actor,
        target=target or Target(),
        arguments=arguments,
        context=context or Context(),
    )


def encode_line(audit_event: AuditEvent) -> bytes:
    """One line: the event's JSON and a newline."""
    return _encoder.encode(audit_event) + b"\n"


_TIME_MARK = "\x00time\x00"
_EMPTY_CONTEXT_END = b"{}}"


class LineTemplate:
    """The encoded line of an event whose time and context are still to come: `line`
    splices them in, byte for byte what `encode_line` of the whole event writes (the time
    is the second field, the context the last; both are encoded, never pasted raw). A tool
    call repeats its line but for those two: the template spares building and encoding the
    rest each time."""

    __slots__ = ("_head", "_middle")

    def __init__(
        self,
        kind: str,
        outcome: Outcome,
        actor: Actor,
        *,
        target: Target | None = None,
        arguments: Arguments | None = None,
    ) -> None:
        class_uid, activity_id = OCSF_CLASSES[kind]
        whole = _encoder.encode(
            AuditEvent(
                schema=SCHEMA,
                time=_TIME_MARK,
                type=kind,
                ocsf_class_uid=class_uid,
                ocsf_activity_id=activity_id,
                outcome=outcome,
                actor=actor,
                target=target or Target(),
                arguments=arguments,
            )
        )
        mark = _encoder.encode(_TIME_MARK)
        head, found, rest = whole.partition(mark)
        if not found or not rest.endswith(_EMPTY_CONTEXT_END) or mark in rest:
            raise ValueError("the event's encoding has moved its time or context")
        self._head = head
        self._middle = rest[: -len(_EMPTY_CONTEXT_END)]

    def line(self, context: Context) -> bytes:
        """The line at the current time, from `context`, with its newline."""
        time_text = _encoder.encode(now_rfc3339())
        return b"".join((self._head, time_text, self._middle, _encoder.encode(context), b"}\n"))


def arguments_digest(arguments: object) -> str:
    """sha256 of the arguments' canonical JSON (keys sorted, no spaces), as `sha256:<hex>`."""
    return "sha256:" + hashlib.sha256(_canonical.encode(arguments)).hexdigest()
