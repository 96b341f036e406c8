"""Decoding one snapshot record: msgspec validates, failures become a LoadError naming it.

Every loader step decodes its array item by item with `decode_records`, so an error says
which record (`workflows[3] (id …)`) and which field (`nodes[2].type`) is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypeVar
from uuid import UUID

import msgspec

from service.errors import LoadError
from service.rules.identifiers import UUID_PATTERN

T = TypeVar("T")

_AT = re.compile(r"^(?P<msg>.*?) - at `\$(?P<path>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]+)`$")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<field>[^`]+)`$")
_UUID = re.compile(UUID_PATTERN)


def label(array: str, index: int, record_id: object = None) -> str:
    """How an error names a record: `workflows[3] (id 33333333-…)`."""
    if isinstance(record_id, str) and record_id:
        shown = record_id if len(record_id) <= 64 else record_id[:64] + "…"
        return f"{array}[{index}] (id {shown})"
    return f"{array}[{index}]"


def _field_and_message(text: str) -> tuple[str, str]:
    """Split msgspec's 'Expected `int` - at `$.nodes[2].typeVersion`' into field and text."""
    path = ""
    match = _AT.match(text)
    if match:
        text, path = match.group("msg"), match.group("path").lstrip(".")
    for pattern, message in ((_MISSING, "is required"), (_UNKNOWN, "is not a snapshot field")):
        found = pattern.match(text)
        if found:
            name = found.group("field")
            return (f"{path}.{name}" if path else name), message
    return path, text[:1].lower() + text[1:]


def decode_record(raw: msgspec.Raw, kind: type[T], array: str, index: int) -> T:
    """Decode one array item as `kind`, or raise LoadError naming the record and field."""
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as err:
        field, message = _field_and_message(str(err))
        raise LoadError(label(array, index, _id_of(raw)), field, message) from err
    except msgspec.DecodeError as err:  # after ValidationError, its subclass
        # The document parser keeps records raw and checks their text only here.
        raise LoadError(label(array, index), "", f"is not valid JSON ({err})") from err


def decode_records(items: Sequence[msgspec.Raw], kind: type[T], array: str) -> list[T]:
    return [decode_record(raw, kind, array, i) for i, raw in enumerate(items)]


def _id_of(raw: msgspec.Raw) -> object:
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    return value.get("id") if isinstance(value, dict) else None


def check_id(value: UUID, where: str, field: str) -> UUID:
    """Ids must match the tools' output UUID pattern (version 1–8, RFC variant, nil or max),
    or no tool could return them."""
    if not _UUID.match(str(value)):
        raise LoadError(where, field, f"{value} is not an RFC 9562 UUID (version 1–8)")
    return value


def unique_ids(ids: Sequence[UUID], array: str) -> None:
    """Reject the same id twice in one array: which of the two should win is not knowable."""
    first: dict[UUID, int] = {}
    for index, record_id in enumerate(ids):
        if record_id in first:
            raise LoadError(
                label(array, index, str(record_id)),
                "id",
                f"duplicate of {array}[{first[record_id]}]",
            )
        first[record_id] = index
