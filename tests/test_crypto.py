"""The shared wire primitives: strict base64url and per-purpose key derivation."""

from __future__ import annotations

import base64

import pytest

from service.crypto import b64url, b64url_strict, derive_key, key_id

pytestmark = pytest.mark.unit

RAW = bytes(range(256))


@pytest.mark.parametrize("size", [1, 2, 3, 16, 50, 256])
def test_b64url_round_trips_without_padding(size: int) -> None:
    text = b64url(RAW[:size])
    assert "=" not in text
    assert b64url_strict(text) == RAW[:size]


@pytest.mark.parametrize(
    "text",
    [
        "",  # nothing is not a token
        "AAA=",  # padding
        "+/8",  # standard alphabet
        "AAAAA",  # a length no encoding has
        "AB",  # stray bits after the last byte: decodes, but is not what we emit
        "AA AA",
        "AAé",
    ],
)
def test_b64url_strict_refuses_any_other_spelling(text: str) -> None:
    assert b64url_strict(text) is None


def test_b64url_strict_refuses_the_standard_form_of_real_bytes() -> None:
    raw = b"\xfb\xff\xfe"
    assert b64url_strict(base64.b64encode(raw).decode()) is None
    assert b64url_strict(b64url(raw)) == raw


def test_derived_keys_are_the_ones_already_in_use() -> None:
    # Session ids and cursors issued before a deploy must still verify after it.
    assert derive_key(b"pem one", "session").hex().startswith("a14d30d9c2b416f4")
    assert derive_key(b"pem one", "cursor").hex().startswith("0f35f36c0713ef52")


def test_derived_keys_differ_by_purpose_and_signing_key() -> None:
    session, cursor = derive_key(b"pem one", "session"), derive_key(b"pem one", "cursor")
    assert len(session) == len(cursor) == 32
    assert session != cursor
    assert derive_key(b"pem one", "session") == session
    assert derive_key(b"pem two", "session") != session
    assert len(key_id(session)) == 4 and key_id(session) != key_id(cursor)
