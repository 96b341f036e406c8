"""The client metadata the service keeps, and the bound of each field: the same for a
registration (RFC 7591) and for a Client ID Metadata Document.

The bounds are msgspec constraints on the Structs' field types, so the decoder itself
refuses an over-long value and names it (`… length <= 1000 - at $.logo_uri`): refused,
never cut. `INFORMATION` are the fields kept only as information about the client (none may
hold control or format characters); a registration document as a whole is at most
`MAX_DOCUMENT_BYTES`. Which fields are kept, why, and what is dropped:
docs/decisions/oauth.md, "Registration bounds".
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated

import msgspec

from service.auth.clients.registry import MAX_REDIRECT_URI_LENGTH

MAX_DOCUMENT_BYTES = 16 * 1024
# Arrays and objects inside one another: a registration document needs 3 (jwks 5); how deep
# a parser goes before it gives up is the interpreter's (Python 3.13 goes far deeper than
# 3.11), so the bound is ours.
MAX_NESTING = 32
MAX_REDIRECT_URIS = 10
MAX_INFO_URL_LENGTH = 1000

RedirectURI = Annotated[str, msgspec.Meta(max_length=MAX_REDIRECT_URI_LENGTH)]
RedirectURIs = Annotated[list[RedirectURI], msgspec.Meta(max_length=MAX_REDIRECT_URIS)]
ClientName = Annotated[str, msgspec.Meta(max_length=200)]
Scope = Annotated[str, msgspec.Meta(max_length=200)]
Method = Annotated[str, msgspec.Meta(max_length=64)]  # token_endpoint_auth_method, application_type
Entries = Annotated[list[Method], msgspec.Meta(max_length=10)]
InfoURL = Annotated[str, msgspec.Meta(max_length=MAX_INFO_URL_LENGTH)]
SoftwareId = Annotated[str, msgspec.Meta(max_length=200)]
SoftwareVersion = Annotated[str, msgspec.Meta(max_length=100)]

# The informational fields: stored in `metadata` and echoed (registration) as sent.
INFORMATION = ("client_uri", "logo_uri", "tos_uri", "policy_uri", "software_id", "software_version")


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(rb"[\[\]{}]")


def nesting_problem(document: bytes) -> str | None:
    """Why a JSON document is nested too deeply (over MAX_NESTING), or None. Brackets
    inside strings do not count; a malformed document is left to the parser."""
    depth = 0
    for bracket in _BRACKET.finditer(_STRING.sub(b'""', document)):
        depth += 1 if bracket[0] in b"[{" else -1
        if depth > MAX_NESTING:
            return f"the client metadata is nested too deeply (at most {MAX_NESTING} levels)"
    return None


def size_refusal(message: str) -> bool:
    """A msgspec refusal about a bound (length, count), rather than a type."""
    return "length" in message


def field_of(message: str) -> str | None:
    """The top-level field a msgspec error names (`… - at $.logo_uri` → logo_uri)."""
    _, sep, where = message.rpartition(" - at `$.")
    if not sep:
        _, sep, where = message.rpartition(" - at $.")
    if not sep:
        return None
    return where.rstrip("`").split("[", 1)[0].split(".", 1)[0]


def information_problem(values: dict[str, str]) -> str | None:
    """Why one of the informational values cannot be kept (a control or format character),
    or None."""
    for name, value in values.items():
        if any(unicodedata.category(ch)[0] in "CZ" and ch != " " for ch in value):
            return f"{name} may not contain control or invisible characters"
    return None
