"""The text block of a tools/call result is made from the structuredContent's bytes
(service.mcp.protocol.text_content): it must be byte for byte what msgspec makes of the
decoded text, whatever JSON the page holds."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.mcp import protocol as p
from service.mcp.rpc import modern_meta


def _by_msgspec(structured: bytes) -> bytes:
    return msgspec.json.encode([p.TextContent(text=structured.decode("utf-8"))])


@pytest.mark.parametrize(
    "structured",
    [
        b"",
        b"{}",
        b'{"name":"quote \\" and backslash \\\\ and slash /"}',
        '{"name":"é ☃ 😀 \u2028 \x7f"}'.encode(),
        b'{"escaped":"\\u0000\\n\\t\\u001f"}',
        b'{"raw": {"k": "v"},\n\t"copied":"from the store"}',  # a Raw field's whitespace
    ],
)
def test_the_text_block_is_msgspecs(structured: bytes) -> None:
    assert bytes(p.text_content(structured)) == _by_msgspec(structured)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
)


@given(_JSON)
def test_any_json_from_msgspec(value: object) -> None:
    structured = msgspec.json.encode(value)
    assert bytes(p.text_content(structured)) == _by_msgspec(structured)


@given(_JSON, st.sampled_from([None, 0, 2, "\t"]))
def test_json_copied_from_the_store(value: object, indent: int | str | None) -> None:
    # A Raw field copies stored JSON as it is, with whatever whitespace it holds.
    stored = json.dumps(value, indent=indent, ensure_ascii=False).encode()
    structured = msgspec.json.encode({"copied": msgspec.Raw(stored)})
    assert bytes(p.text_content(structured)) == _by_msgspec(structured)


@pytest.mark.parametrize("modern", [True, False])
@pytest.mark.parametrize(
    "structured",
    [b"{}", '{"name":"é ☃ 😀 \\" \\\\"}'.encode(), b'{"raw": {"k": "v"},\n\t"c":"x"}'],
)
def test_the_success_body_is_the_result_encoded(modern: bool, structured: bytes) -> None:
    # The tool call and the bench's same-answer ceiling both answer with success_body.
    meta = modern_meta() if modern else None
    result = p.CallToolResult(
        content=[p.TextContent(text=structured.decode("utf-8"))],
        structured_content=msgspec.Raw(structured),
        is_error=False,
    )
    if meta is not None:
        result.result_type = p.COMPLETE
        result.meta = meta
    for request_id in (7, "abc", None):
        assert p.success_body(request_id, structured, meta) == p.result_body(request_id, result)
