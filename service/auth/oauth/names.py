"""Client metadata values shared by registration and metadata documents: the shown name and
the registered scope, cleaned and checked the same way for both."""

from __future__ import annotations

from service.auth.caller import ALL_SCOPES

MAX_NAME_LENGTH = 200
_CONTROL = {c: "\ufffd" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}


def clean_client_name(raw: str | None) -> str:
    """Control characters replaced by U+FFFD, cut to 200 code points, trimmed ("" if none)."""
    return (raw or "").translate(_CONTROL).strip()[:MAX_NAME_LENGTH]


def registered_scope(scope: str | None) -> str | None:
    """A client's registered scope in catalog order, None when empty; ValueError naming an
    unknown scope."""
    if scope is None or not scope.strip():
        return None
    unknown = sorted(set(scope.split()) - set(ALL_SCOPES))
    if unknown:
        raise ValueError(f"unknown scope {' '.join(unknown)}; supported: {' '.join(ALL_SCOPES)}")
    return " ".join(s for s in ALL_SCOPES if s in scope.split())
