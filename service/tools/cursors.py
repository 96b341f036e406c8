"""Opaque, versioned, authenticated cursors (docs/reading-rules.md, Paging and cursors):
`CursorCodec` issues and opens them (AES-256-GCM, the binding as associated data), and
`check_fresh` tells a stale one (MCP_CURSOR_STALE) from a valid one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from service.auth.caller import Caller
from service.crypto import b64url, b64url_strict, derive_key, key_id
from service.errors import CursorStale, ValidationError

_VERSION = 1
_HINT = "Send nextCursor exactly as returned, with the same tool, filters and limit."


class CursorState(msgspec.Struct, array_like=True):
    read_generation: int
    position: list[Any]


_encode = msgspec.msgpack.Encoder().encode
_decode_state = msgspec.msgpack.Decoder(CursorState).decode


def derive_cursor_key(signing_key_pem: bytes) -> bytes:
    return derive_key(signing_key_pem, "cursor")


class CursorCodec:
    """Wire form: base64url without padding of

        version (1 byte) | key id (4 bytes) | nonce (12 bytes) | AES-256-GCM(payload) + tag

    The payload (msgpack) carries the workspace read generation and the keyset position. The
    binding (tool, account, approval and its generation, eligible-set digest, filters,
    limit) is the AEAD's associated data: it is never stored in the cursor, and a cursor
    presented under any other binding fails authentication exactly like a tampered one
    (VALIDATION_ERROR). A cursor whose binding holds but whose read generation differs is
    MCP_CURSOR_STALE.

    Keys derive from the signing key (HKDF), so every replica holding the same signing key
    shares them; previous signing keys keep their cursors readable during a rotation."""

    def __init__(self, current: bytes, previous: Sequence[bytes] = ()) -> None:
        self._current_id = key_id(current)
        self._current = AESGCM(current)
        self._keys = {key_id(k): AESGCM(k) for k in (*previous, current)}

    @staticmethod
    def binding(tool: str, caller: Caller, filters: Sequence[Any], limit: int) -> bytes:
        """What a cursor is bound to. `filters` must be the tool's filters in a fixed order,
        normalised (lowercase UUIDs, defaults applied), so equal requests bind equally."""
        return _encode(
            [
                tool,
                caller.account_id.bytes,
                caller.approval_id.bytes,
                caller.generation,
                caller.eligible_digest,
                list(filters),
                limit,
            ]
        )

    def issue(self, binding: bytes, read_generation: int, position: Sequence[Any]) -> str:
        nonce = os.urandom(12)
        payload = _encode(CursorState(read_generation, list(position)))
        sealed = self._current.encrypt(nonce, payload, binding)
        raw = bytes([_VERSION]) + self._current_id + nonce + sealed
        return b64url(raw)

    def open(self, cursor: str, binding: bytes) -> CursorState:
        """Authenticate a cursor under this binding, or raise VALIDATION_ERROR."""
        raw = b64url_strict(cursor)
        if raw is None or len(raw) < 1 + 4 + 12 + 16 or raw[0] != _VERSION:
            raise ValidationError("`cursor` is not a cursor this tool issued.", hint=_HINT)
        key = self._keys.get(raw[1:5])
        if key is None:
            raise ValidationError("`cursor` is not a cursor this tool issued.", hint=_HINT)
        try:
            payload = key.decrypt(raw[5:17], raw[17:], binding)
            return _decode_state(payload)
        except (InvalidTag, msgspec.DecodeError, msgspec.ValidationError) as err:
            raise ValidationError(
                "`cursor` does not belong to this request: keep the same tool, filters, limit "
                "and connection, or start again without a cursor.",
                hint=_HINT,
            ) from err


def check_fresh(state: CursorState, read_generation: int) -> None:
    if state.read_generation != read_generation:
        raise CursorStale()
