"""The audit line of one `tools/call`, whatever its outcome: an answer, a tool error, a
refusal (401, 403, 429, bad arguments) or 503. Never sampled.

`audited` records the line before the answer leaves; when the line finds no room in time
the answer is replaced by a 503 (the tool's data never leaves without its line).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from service.app_keys import CALLER, CATALOG, CONFIG
from service.audit.events import (
    TOOL_CALL,
    Actor,
    Arguments,
    LineTemplate,
    Outcome,
    Target,
    arguments_digest,
)
from service.audit.trail import context_of, record_line
from service.auth.bearer import pending_caller
from service.auth.caller import Caller
from service.errors import AuditUnavailable
from service.mcp import error_boundary
from service.mcp import protocol as p
from service.mcp.envelope import Incoming
from service.mcp.rpc import Answer
from service.rules.identifiers import UUID_PATTERN

# Arguments that identify no one and no record: kept in clear. Ids go to the target.
CLEAR_ARGUMENTS = frozenset({"limit", "period", "status", "timeZone", "lifecycle"})
RECORD_ID_ARGUMENTS = ("workspaceId", "instanceId", "workflowId", "executionId")
_UUID = re.compile(UUID_PATTERN)
_PLAIN = re.compile(r"[A-Za-z0-9_+\-/:.]{1,64}\Z")


class _Error(msgspec.Struct):
    code: int


class _ErrorBody(msgspec.Struct):
    error: _Error | None = None


_error_decoder = msgspec.json.Decoder(_ErrorBody)


def _jsonrpc_code(answer: Answer) -> int | None:
    if answer.outcome == "ok" or answer.outcome.startswith("tool_error") or not answer.body:
        return None
    if answer.rpc_code is not None:
        return answer.rpc_code  # what the error boundary wrote into the body
    try:
        found = _error_decoder.decode(answer.body)
    except msgspec.DecodeError:
        return None
    return found.error.code if found.error is not None else None


def _caller(request: web.Request) -> Caller | None:
    """The confirmed caller, else the one the verified token names (unconfirmed)."""
    caller: Caller | None = request.get(CALLER)
    if caller is not None:
        return caller
    return pending_caller(request)  # the bearer check's verdict: no second verification


@dataclass(frozen=True, slots=True)
class _Read:
    """What a call's line says of its arguments: the digest and the clear ones, and the
    record ids they name (shared by the lines of equal arguments: never changed)."""

    arguments: Arguments
    records: dict[str, str]


# Arguments seen before → their reading: a client repeats the same arguments (paging aside),
# a flood always. Bounded in entries and in the size of each.
_READS: dict[bytes, _Read] = {}
_KNOWN_READS = 1024
_REMEMBERED_ARGUMENT_BYTES = 1024


def _arguments(raw: object) -> _Read:
    key = bytes(raw) if isinstance(raw, msgspec.Raw) else None
    if key is not None and (known := _READS.get(key)) is not None:
        return known
    read = _read(raw)
    if key is not None and len(key) <= _REMEMBERED_ARGUMENT_BYTES:
        if len(_READS) >= _KNOWN_READS:
            _READS.clear()
        _READS[key] = read
    return read


def _read(raw: object) -> _Read:
    try:
        value: Any = msgspec.json.decode(raw) if isinstance(raw, msgspec.Raw) else {}
    except msgspec.DecodeError:
        value = None
    clear: dict[str, Any] = {}
    given: dict[str, Any] = value if isinstance(value, dict) else {}
    for name in CLEAR_ARGUMENTS & given.keys():
        item = given[name]
        if name == "limit":
            if isinstance(item, int) and not isinstance(item, bool):
                clear[name] = item
        elif isinstance(item, str) and _PLAIN.match(item):
            clear[name] = item
    records = {
        key: record.lower()
        for key in RECORD_ID_ARGUMENTS
        if isinstance(record := given.get(key), str) and _UUID.match(record)
    }
    return _Read(Arguments(digest=arguments_digest(value), clear=clear), records)


def _target(
    request: web.Request, name: str, records: dict[str, str], caller: Caller | None
) -> Target:
    tool = request.app[CATALOG].tool(name)
    workspaces = [records["workspaceId"]] if "workspaceId" in records else []
    if not workspaces and caller is not None and caller.confirmed:
        workspaces = sorted(str(w) for w in caller.eligible)
    return Target(
        tool=tool.name if tool is not None else None,
        workspace_ids=workspaces,
        record_ids=records,
    )


def _outcome(answer: Answer) -> Outcome:
    code = answer.outcome.partition(":")[2]
    tool_error = code if answer.outcome.startswith("tool_error") else None
    ok = answer.outcome == "ok"
    return Outcome(
        result="success" if ok else "failure",
        http_status=answer.status,
        jsonrpc_code=_jsonrpc_code(answer),
        tool_error=tool_error,
    )


# The line template of each kind of line seen before: a client repeats its calls (paging
# aside), a flood of refusals always. Bounded like `_READS`.
_TEMPLATES: dict[tuple[object, ...], LineTemplate] = {}
_KNOWN_TEMPLATES = 1024


def _template_key(
    answer: Answer, caller: Caller | None, name: str, raw: object, read: _Read
) -> tuple[object, ...] | None:
    """What a line says but for its time and context, as a key; None when that depends on
    more (an error code read from the body, a caller's eligible set, arguments too long to
    remember)."""
    if not isinstance(raw, msgspec.Raw) or len(raw) > _REMEMBERED_ARGUMENT_BYTES:
        return None
    if answer.rpc_code is None and _jsonrpc_code(answer) is not None:
        return None
    if caller is None:
        who: tuple[object, ...] = ()
    elif caller.confirmed and "workspaceId" not in read.records:
        return None  # the target names the eligible workspaces
    else:
        who = (caller.account_id, caller.client_id, caller.approval_id, caller.confirmed)
    return (answer.status, answer.outcome, answer.rpc_code, who, name, bytes(raw))


def _new_template(
    request: web.Request, answer: Answer, caller: Caller | None, name: str, read: _Read
) -> LineTemplate:
    actor = (
        Actor(
            account_id=str(caller.account_id),
            client_id=caller.client_id,
            approval_id=str(caller.approval_id),
            confirmed=caller.confirmed,
        )
        if caller is not None
        else Actor(confirmed=False)
    )
    return LineTemplate(
        TOOL_CALL,
        _outcome(answer),
        actor,
        target=_target(request, name, read.records, caller),
        arguments=read.arguments,
    )


def _template(
    request: web.Request, answer: Answer, caller: Caller | None, name: str, raw: object
) -> LineTemplate:
    read = _arguments(raw)
    key = _template_key(answer, caller, name, raw, read)
    if key is not None and (known := _TEMPLATES.get(key)) is not None:
        return known
    template = _new_template(request, answer, caller, name, read)
    if key is not None:
        if len(_TEMPLATES) >= _KNOWN_TEMPLATES:
            _TEMPLATES.clear()
        _TEMPLATES[key] = template
    return template


async def audited(
    request: web.Request, app: web.Application, incoming: Incoming, answer: Answer
) -> Answer:
    """The answer, once the line of its tools/call is queued on `app`'s writer (other
    methods: unchanged)."""
    params = incoming.params
    if incoming.method != "tools/call":
        return answer
    caller = _caller(request)
    name = params.name if isinstance(params, p.CallToolParams) else ""
    raw = params.arguments if isinstance(params, p.CallToolParams) else None
    context = context_of(request, app[CONFIG].trusted_proxies)
    line = _template(request, answer, caller, name, raw).line(context)
    try:
        # A refusal (an error status) carries no data: its line may join a flood's batch.
        await record_line(app, line, refusal=answer.status >= 400)
    except AuditUnavailable as err:
        return error_boundary.unavailable(incoming.id, err.message, err.retry_after)
    return answer
