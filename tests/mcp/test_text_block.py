"""The text block of a tool result is written by `json_string` without decoding the
structured JSON: it must be byte for byte what msgspec writes for the decoded text."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from service.mcp.calls import json_string

_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(_values)
def test_text_block_equals_msgspec_encoding_of_the_text(value: object) -> None:
    structured = msgspec.json.encode(value)
    assert bytes(json_string(structured)) == msgspec.json.encode(structured.decode("utf-8"))


@given(st.text())
def test_stored_json_with_raw_whitespace_is_still_escaped(text: str) -> None:
    # Stored JSON (a history report) may carry raw newlines and tabs between tokens.
    structured = b'{\n\t"history": ' + msgspec.json.encode(text) + b"\r\n}"
    encoded = bytes(json_string(structured))
    assert encoded == msgspec.json.encode(structured.decode("utf-8"))
    assert msgspec.json.decode(encoded) == structured.decode("utf-8")
