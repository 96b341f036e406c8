"""Small primitives shared by everything that puts our own bytes on the wire.

Session ids (service/mcp/sessions.py) and cursors (service/tools/cursors.py) are both
authenticated byte strings sent as unpadded base64url under a key derived from the signing
key; tokens, password hashes and PKCE use the same base64url form. One place so that the
strict decoding rule and the derivation stay identical wherever they are used.
"""

from __future__ import annotations

import base64
import hashlib
import re

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_B64URL = re.compile(r"^[A-Za-z0-9_-]+\Z")


def b64url(raw: bytes) -> str:
    """Unpadded base64url (RFC 4648 §5), the form JOSE and our own wire tokens use."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def b64url_strict(text: str) -> bytes | None:
    """Decode only the exact text `b64url` emits (re-encoding gives the same string), else
    None: no padding, no standard alphabet, no stray trailing bits."""
    if not _B64URL.match(text) or len(text) % 4 == 1:
        return None
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if b64url(raw) != text:
        return None
    return raw


def derive_key(signing_key_pem: bytes, purpose: str) -> bytes:
    """A 32-byte key for one purpose ("session", "cursor"), the same on every replica that
    holds the signing key, and unrelated to the key of any other purpose."""
    name = purpose.encode("ascii")
    return HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"elova-mcp " + name, info=name + b" key v1"
    ).derive(signing_key_pem)


def key_id(key: bytes) -> bytes:
    """Four bytes naming a derived key, so a token says which (current or previous) key made
    it without revealing anything about the key."""
    return hashlib.sha256(b"kid" + key).digest()[:4]
