"""Bad bytes are bad input: the rule that what a client sends as text is text.

A query string, a form (its names and values) or a JSON body must be Unicode text without
NUL (U+0000). These predicates are the one statement of that rule: the middleware of
`service/server/bad_input.py` applies it to queries, cookies, forms and JSON bodies on every
route but /mcp, whose envelope checks its own body and whose tools name the argument that
holds a NUL. Why, and what each route answers: docs/decisions/hardening.md, "Bad bytes
(issue 21)".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote_to_bytes

_NOT_TEXT = re.compile("[\x00\ud800-\udfff]")
# `\u0000` preceded by an even number of backslashes (none included) is an escaped NUL;
# after an odd number it is the six characters `\u0000` of an escaped backslash.
_NUL_ESCAPE = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")


def is_text(value: str) -> bool:
    """No NUL and no surrogate code point (what `surrogateescape` leaves of bad bytes)."""
    return _NOT_TEXT.search(value) is None


def all_text(values: Iterable[object]) -> bool:
    """Every string among `values` is text (other values, such as uploaded files, pass)."""
    return all(is_text(value) for value in values if isinstance(value, str))


def urlencoded_is_text(raw: str | bytes) -> bool:
    """A query string or urlencoded form, before decoding: its bytes and its percent-escapes
    decode as UTF-8 without NUL. `&`, `=` and `+` are ASCII, so checking the whole string at
    once is checking every name and value."""
    if isinstance(raw, str):
        try:
            raw = raw.encode("utf-8")
        except UnicodeEncodeError:  # a request target's bad bytes, kept as surrogates
            return False
    if b"%" in raw:
        raw = unquote_to_bytes(raw)
    if b"\x00" in raw:
        return False
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def json_has_nul(body: bytes) -> bool:
    """Whether a JSON document (one that parsed) has a NUL in a string or a key.

    msgspec already refuses invalid UTF-8 and unpaired surrogate escapes (`"\\ud800"`) in
    JSON, so a JSON body that decoded needs only this check, which costs one substring
    search on every body that has no NUL escape."""
    return b"\\u0000" in body and _NUL_ESCAPE.search(body) is not None


def nul_path(value: object, path: str = "") -> str | None:
    """Where in decoded JSON the first NUL is (`filters.status[1]`), or None."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            found = here if "\x00" in str(key) else nul_path(item, here)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = nul_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None
