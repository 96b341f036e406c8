"""Client metadata values shared by registration and metadata documents: the shown name and
the registered scope, cleaned and checked the same way for both.

A client name is text a person reads on the approval page, so nothing in it may be
invisible or reorder what is around it (`clean_client_name`); the same cleaning runs when a
stored name is shown (docs/decisions/oauth.md, "The consent page cannot be spoofed").
"""

from __future__ import annotations

import re
import unicodedata

from service.auth.caller import ALL_SCOPES

MAX_NAME_LENGTH = 200
MAX_SCOPE_LENGTH = 200
DEFAULT_CLIENT_NAME = "Unnamed application"
_CONTROL = {c: "\ufffd" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}
# Invisible although not of category Cf (or Zs), hence named one by one.
_INVISIBLE = frozenset(
    [0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800, 0x034F, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D,
     0x180F, *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)]
)  # fmt: skip
_REMOVED_CATEGORIES = frozenset({"Cf", "Cs", "Cn", "Zl", "Zp"})
_SPACES = re.compile(r"\s+")
_MAX_MARKS = 2


def _kept(ch: str) -> str:
    if ord(ch) in _INVISIBLE:
        return ""
    cat = unicodedata.category(ch)
    if cat in _REMOVED_CATEGORIES:
        return ""
    return " " if cat == "Zs" else ch


def clean_client_name(raw: str | None) -> str:
    """The name as a page may show it, trimmed ("" if none), at most `MAX_NAME_LENGTH`.

    Control characters become U+FFFD; bidirectional controls (U+202A–202E, U+2066–2069,
    U+200E/200F, U+061C) and every other format character (Unicode category Cf: zero-width
    space and joiners, word joiner, BOM, soft hyphen, tags…), line and paragraph separators,
    unassigned and surrogate code points, the invisible fillers (Hangul fillers, braille
    blank, combining grapheme joiner, variation selectors) are removed; other spaces become
    one plain space; more than two combining marks on one letter are cut to two."""
    text = (raw or "").translate(_CONTROL)
    out: list[str] = []
    marks = 0
    for ch in text:
        kept = _kept(ch)
        if kept and unicodedata.category(kept) in ("Mn", "Me"):
            marks += 1
            if marks > _MAX_MARKS:
                continue
        else:
            marks = 0
        out.append(kept)
    return _SPACES.sub(" ", "".join(out)).strip()[:MAX_NAME_LENGTH]


def shown_client_name(stored: str) -> str:
    """A stored name cleaned again for a page (rows from before the current rules)."""
    return clean_client_name(stored) or DEFAULT_CLIENT_NAME


def registered_scope(scope: str | None) -> str | None:
    """A client's registered scope in catalog order, None when empty; ValueError naming an
    unknown scope."""
    if scope is None or not scope.strip():
        return None
    unknown = sorted(set(scope.split()) - set(ALL_SCOPES))
    if unknown:
        raise ValueError(f"unknown scope {' '.join(unknown)}; supported: {' '.join(ALL_SCOPES)}")
    return " ".join(s for s in ALL_SCOPES if s in scope.split())
