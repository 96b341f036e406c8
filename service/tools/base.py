"""What every tool shares: its declaration, the per-call context, argument types and decoding.

A tool is a params Struct (msgspec validates the arguments against it, mirroring the
catalog's inputSchema), an async handler returning an output Struct, and the scope it needs.
Dispatch authorizes the caller and holds the limits; tools/call decodes the arguments, runs
the handler under the deadline and encodes the result; handlers only read records and shape
them (a handler of a tool with `authorizes` also confirms its caller from its first read).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Annotated, Any, Generic, TypeVar
from uuid import UUID

import asyncpg
import msgspec

from service.auth.authorization import Authorization
from service.auth.caller import Caller
from service.edge.text_rule import json_has_nul, nul_path
from service.errors import NotFound, ValidationError
from service.rules.identifiers import UUID_PATTERN, parse_id
from service.tools import paging
from service.tools.arguments import explain
from service.tools.cursors import CursorCodec

P = TypeVar("P", bound=msgspec.Struct)
_encode = msgspec.json.Encoder().encode

UuidArg = Annotated[str, msgspec.Meta(pattern=UUID_PATTERN)]
_LimitInt = Annotated[int, msgspec.Meta(ge=1, le=50)]
_LimitFloat = Annotated[float, msgspec.Meta(ge=1, le=50)]
# JSON Schema integers include 5.0; Params.__post_init__ turns integral floats into int.
LimitArg = _LimitInt | _LimitFloat
TimeZoneArg = Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
# \Z, not $, as in service/rules/identifiers.py.
Period = Annotated[str, msgspec.Meta(pattern=r"^(today|7d|30d|all)\Z")]


class Params(msgspec.Struct, forbid_unknown_fields=True, frozen=False):
    """Base of every tool's arguments: unknown arguments are rejected."""

    def __post_init__(self) -> None:
        limit = getattr(self, "limit", None)
        if isinstance(limit, float):
            if not limit.is_integer():
                raise ValueError("`limit` must be a whole number from 1 to 50.")
            # setattr: `limit` is declared by each tool's Params subclass, not by this base.
            setattr(self, "limit", int(limit))  # noqa: B010


class Output(msgspec.Struct, omit_defaults=True):
    """Base of every output Struct. Optional fields default to msgspec.UNSET (omitted).

    Because of omit_defaults, a REQUIRED field must never have a default value (not even a
    constant like `partial: bool = True`): it would vanish from the output when equal to it.
    """


class ToolContext(msgspec.Struct):
    """What a handler may use for one call (a Struct: one is made for every tool call, and
    its init is cheaper than a dataclass's)."""

    pool: asyncpg.Pool
    authorization: Authorization  # the request's caller (pending for a tool that `authorizes`)
    cursors: CursorCodec
    now: datetime  # one instant per call (UTC, aware): asOf and period windows use it
    max_response_bytes: int
    response_overhead: int  # bytes of the JSON-RPC envelope around the tool result
    # The last result `encode` produced and its JSON: a page measured against the response
    # bound is not encoded a second time for the answer.
    _encoded: tuple[msgspec.Struct, bytes] | None = None

    def encode(self, result: msgspec.Struct) -> bytes:
        """`result` as JSON (structuredContent), remembered for the answer."""
        if self._encoded is not None and self._encoded[0] is result:
            return self._encoded[1]
        encoded = _encode(result)
        self._encoded = (result, encoded)
        return encoded

    @property
    def caller(self) -> Caller:
        return self.authorization.caller

    def authorize(self, approval: Mapping[str, Any] | None) -> None:
        """Confirm a pending caller (a tool with `authorizes`) from the `approval_state`
        columns its first statement read: 401 when the approval no longer backs the token,
        then 403 when it lacks the tool's scope. A confirmed caller is left as it is."""
        self.authorization.confirm_from(approval)

    def workspace_role(self, workspace_id: UUID) -> str:
        """The caller's role in an eligible workspace, else NOT_FOUND (indistinguishable)."""
        role = self.caller.role_in(workspace_id)
        if role is None:
            raise NotFound("No such workspace is granted to this connection.")
        return role

    def fits(self, structured: bytes) -> bool:
        """Whether a result with this structuredContent stays within the response bound
        (service.tools.paging.fits: the envelope's bytes are taken off the bound)."""
        return paging.fits(structured, self.max_response_bytes - self.response_overhead)


Handler = Callable[[ToolContext, Any], Awaitable[msgspec.Struct]]


@dataclass(frozen=True)
class Tool(Generic[P]):
    name: str
    scope: str
    params: type[P]
    handler: Callable[[ToolContext, P], Awaitable[msgspec.Struct]]
    # True: the handler's first statement also reads the caller's approval and confirms it
    # (`ToolContext.authorize`), so dispatch does not read it first: one round trip less on
    # the hottest calls. Any answer given before that confirmation leaves only after the
    # approval was read on its own (service/mcp/dispatch.py).
    authorizes: bool = False

    def decode(self, raw_arguments: bytes) -> P:
        """Decode and validate `arguments` (raw JSON) or raise VALIDATION_ERROR naming the field."""
        try:
            decoded = msgspec.json.decode(raw_arguments, type=self.params)
        except msgspec.ValidationError as err:
            message, hint = explain(self.name, str(err))
            raise ValidationError(message, hint=hint) from err
        except msgspec.DecodeError as err:
            raise ValidationError(
                "The arguments are not valid JSON.", hint="Send the arguments as a JSON object."
            ) from err
        if json_has_nul(raw_arguments):  # valid JSON, but no text PostgreSQL can hold
            where = nul_path(msgspec.json.decode(raw_arguments)) or "arguments"
            raise ValidationError(
                f"`{where}` must not contain NUL (U+0000).",
                hint="Remove the NUL character (U+0000) from the argument.",
            )
        return decoded


@lru_cache(maxsize=4096)
def parse_uuid(value: str) -> UUID:
    """A validated UUID argument (pattern already checked) as a UUID (`parse_id`); output is
    lowercase. Remembered: a client asks about the same few workspaces, instances and
    workflows call after call (a UUID is immutable, so sharing one is safe)."""
    return parse_id(value)
