"""Opaque refresh tokens: 32 random bytes, URL-safe; the database keeps only their SHA-256."""

from __future__ import annotations

import hashlib
import secrets

REFRESH_TOKEN_BYTES = 32


def new_refresh_token() -> str:
    """An opaque refresh token: 32 random bytes, URL-safe."""
    return secrets.token_urlsafe(REFRESH_TOKEN_BYTES)


def hash_refresh_token(token: str) -> bytes:
    """What the database stores instead of the token."""
    return hashlib.sha256(token.encode("utf-8")).digest()
