"""The protocol revisions this endpoint speaks, and which era a request belongs to.

Two eras share `/mcp` (docs/protocol.md). **Modern** (2026-07-28) is stateless: every request
names its version in `params._meta` and mirrors it, the method and the tool name into
headers that must agree with the body. **Session** revisions (2025-11-25, 2025-06-18) open
with `initialize` and carry `Mcp-Session-Id` afterwards.
"""

from __future__ import annotations

import base64
import binascii
import re

MODERN = "2026-07-28"
SESSION_VERSIONS = ("2025-11-25", "2025-06-18")
LATEST_SESSION = SESSION_VERSIONS[0]
# Clients that negotiated an older revision may still label session requests 2025-03-26.
SESSION_HEADER_ALIASES = ("2025-03-26",)
SUPPORTED = (MODERN, *SESSION_VERSIONS)

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

# Methods whose params name a target that the Mcp-Name header mirrors.
NAME_BEARING = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

_PREFIX, _SUFFIX = "=?base64?", "?="
# RFC 9110 field values: visible ASCII, space and tab.
_FIELD_VALUE = re.compile(r"^[\x20-\x7e\t]*\Z")


def is_modern(header_version: str | None, meta_version: object) -> bool:
    """A request is modern when its body names a version, or its header names anything that
    is not a session revision (an unknown version then gets the modern -32022 answer)."""
    if meta_version is not None:
        return True
    return header_version is not None and header_version not in (
        *SESSION_VERSIONS,
        *SESSION_HEADER_ALIASES,
    )


def negotiate_session(requested: str) -> str:
    """`initialize`: the requested revision when we serve it, else our latest session one."""
    return requested if requested in SESSION_VERSIONS else LATEST_SESSION


def session_header_ok(header_version: str | None, session_version: str) -> bool:
    return header_version is None or header_version in (session_version, *SESSION_HEADER_ALIASES)


def decode_header_value(value: str) -> str | None:
    """An `Mcp-Name` value as the body would spell it; None when malformed (never matches)."""
    if not _FIELD_VALUE.match(value):
        return None
    # Anything shaped like the sentinel is encoded: a malformed one must never match.
    if not (value.startswith(_PREFIX) and value.endswith(_SUFFIX) and len(value) >= 11):
        return value
    try:
        raw = base64.b64decode(value[len(_PREFIX) : -len(_SUFFIX)], validate=True)
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
