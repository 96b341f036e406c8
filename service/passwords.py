"""Account passwords: a slow, salted scrypt hash; the plain text is never stored.

Stored form (one text value, every parameter in it so they can be raised later):

    scrypt$n=16384,r=8,p=1$<salt, base64url>$<32-byte key, base64url>

`verify_password` reads the parameters from the stored value, bounds them (a forged row
cannot make a sign-in burn unbounded memory) and compares in constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re

from service.crypto import b64url

_N, _R, _P = 2**14, 8, 1  # ~16 MiB, tens of milliseconds a hash
_SALT_BYTES = 16
_KEY_BYTES = 32
_MAX_MEM = 64 * 1024 * 1024
_FORMAT = re.compile(
    r"^scrypt\$n=(?P<n>\d{1,8}),r=(?P<r>\d{1,2}),p=(?P<p>\d{1,2})"
    r"\$(?P<salt>[A-Za-z0-9_-]+)\$(?P<key>[A-Za-z0-9_-]+)\Z"
)


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _derive(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=_MAX_MEM, dklen=_KEY_BYTES
    )


def hash_password(password: str) -> str:
    salt = os.urandom(_SALT_BYTES)
    key = _derive(password, salt, _N, _R, _P)
    return f"scrypt$n={_N},r={_R},p={_P}${b64url(salt)}${b64url(key)}"


def verify_password(password: str, stored: str | None) -> bool:
    """Whether `password` matches a value made by hash_password; False for anything else."""
    if not stored:
        return False
    match = _FORMAT.match(stored)
    if match is None:
        return False
    n, r, p = int(match["n"]), int(match["r"]), int(match["p"])
    if n < 2 or n & (n - 1) or n > 2**20 or not 1 <= r <= 32 or not 1 <= p <= 16:
        return False
    if 128 * n * r + 1024 * r * p > _MAX_MEM:
        return False
    try:
        salt, expected = _unb64(match["salt"]), _unb64(match["key"])
        actual = _derive(password, salt, n, r, p)
    except (ValueError, MemoryError):
        return False
    return hmac.compare_digest(actual, expected)
