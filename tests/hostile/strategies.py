"""Hypothesis strategies for hostile input: tool arguments generated from the catalog's
JSON Schemas (a small generator for the subset elova-tools.json uses), and mutations beyond
them — wrong types, huge numbers, odd Unicode, NUL, deep nesting, duplicate keys, oversized
strings — rendered as raw JSON text so the server's own parser meets them.

`Pairs` is a JSON object written as given (so duplicate keys survive); `RawJson` is text
inserted verbatim (numbers no Python float can hold, `NaN`, escaped lone surrogates).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

CATALOG = Path(__file__).resolve().parents[2] / "service" / "contract" / "elova-tools.json"


@dataclass(frozen=True)
class Pairs:
    """A JSON object written member by member, duplicates included."""

    items: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class RawJson:
    """JSON text written verbatim (valid or not)."""

    text: str


def render(value: Any, *, ascii_only: bool = True) -> str:
    """JSON text of a value tree of dicts, lists, scalars, Pairs and RawJson."""
    if isinstance(value, RawJson):
        return value.text
    if isinstance(value, Pairs):
        members = (
            f"{_string(k, ascii_only)}:{render(v, ascii_only=ascii_only)}" for k, v in value.items
        )
        return "{" + ",".join(members) + "}"
    if isinstance(value, dict):
        return render(Pairs(tuple(value.items())), ascii_only=ascii_only)
    if isinstance(value, list | tuple):
        return "[" + ",".join(render(v, ascii_only=ascii_only) for v in value) + "]"
    if isinstance(value, str):
        return _string(value, ascii_only)
    if isinstance(value, float) and not math.isfinite(value):
        return "1e999" if value > 0 else "-1e999"
    return json.dumps(value)


def _string(text: str, ascii_only: bool) -> str:
    # ensure_ascii escapes lone surrogates as \udXXX: valid JSON text, invalid Unicode.
    if ascii_only or any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return json.dumps(text, ensure_ascii=True)
    return json.dumps(text, ensure_ascii=False)


@cache
def catalog() -> dict[str, dict[str, Any]]:
    """Tool name → inputSchema, from the catalog the server serves."""
    tools = json.loads(CATALOG.read_text("utf-8"))["tools"]
    return {t["name"]: t["inputSchema"] for t in tools}


ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Pacific/Chatham"]


def from_schema(
    schema: dict[str, Any], ids: st.SearchStrategy[str] | None = None
) -> st.SearchStrategy[Any]:
    """Values valid under `schema` (the subset the catalog uses). UUID fields draw from
    `ids` half the time, so valid-shaped calls also reach real and foreign records."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        return _object(schema, ids)
    if kind == "integer":
        return st.integers(schema.get("minimum", -(2**63)), schema.get("maximum", 2**63))
    if kind == "string":
        return _string_value(schema, ids)
    if kind == "boolean":
        return st.booleans()
    raise NotImplementedError(f"schema kind {kind!r} is not used by the catalog")


def _string_value(
    schema: dict[str, Any], ids: st.SearchStrategy[str] | None
) -> st.SearchStrategy[str]:
    if schema.get("format") == "uuid":
        shaped = st.uuids().map(str)
        cased = shaped.map(str.upper)
        pool = [shaped, cased] + ([ids, ids] if ids is not None else [])
        return st.one_of(*pool)
    if "timeZone" in schema.get("description", "") or "time zone" in schema.get("description", ""):
        return st.one_of(
            st.sampled_from(ZONES), st.text(min_size=1, max_size=schema.get("maxLength", 100))
        )
    return st.text(
        min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 64), 64)
    )


def _object(
    schema: dict[str, Any], ids: st.SearchStrategy[str] | None
) -> st.SearchStrategy[dict[str, Any]]:
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    fixed = {k: from_schema(v, ids) for k, v in props.items() if k in required}
    optional = {k: from_schema(v, ids) for k, v in props.items() if k not in required}
    return st.fixed_dictionaries(fixed, optional=optional)


# ---- beyond the schema -------------------------------------------------------------------

odd_text = st.one_of(
    st.text(max_size=40),
    st.text(
        st.characters(categories=["Cs", "Cc", "Cf", "Co", "Zl", "Zp"]), min_size=1, max_size=10
    ),
    st.sampled_from(
        [
            "\x00",
            "a\x00b",
            "\ud800",
            "\udfff\ud800",
            "\u202e",
            "\ufeff",
            "\U0010ffff",
            "../../etc/passwd",
            "'; DROP TABLE workspaces; --",
            "%00",
            "${jndi:ldap://x}",
            "{{7*7}}",
            "Europe/../../UTC",
            "europe/berlin",
            " UTC",
            "UTC\n",
        ]
    ),
)
huge_numbers = st.one_of(
    st.sampled_from(
        [
            RawJson("1e999"),
            RawJson("-1e999"),
            RawJson("1" + "0" * 400),
            RawJson("-" + "9" * 400),
            RawJson("5.0"),
            RawJson("5.5"),
            RawJson("1e2"),
            RawJson("0.1e1"),
            RawJson("-0"),
            RawJson("NaN"),
            RawJson("Infinity"),
            RawJson("0x10"),
            RawJson("01"),
            RawJson("1." + "0" * 300 + "1"),
        ]
    ),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
)
scalars = st.one_of(st.none(), st.booleans(), huge_numbers, odd_text)
any_json: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(odd_text, inner, max_size=4),
    max_leaves=12,
)


def nested(depth: int) -> RawJson:
    """An array nested `depth` deep: `[[[…]]]`."""
    return RawJson("[" * depth + "]" * depth)


deep = st.one_of(
    st.integers(50, 200).map(nested),
    st.integers(1000, 16000).map(nested),
    st.integers(1000, 5000).map(lambda d: RawJson('{"a":' * d + "1" + "}" * d)),
)
oversized = st.one_of(
    st.integers(101, 5000).map(lambda n: "x" * n),
    st.integers(1025, 40000).map(lambda n: "A" * n),
)
hostile_value: st.SearchStrategy[Any] = st.one_of(
    any_json, deep, oversized, st.builds(list), st.builds(dict)
)


@st.composite
def mutated_arguments(draw: st.DrawFn, tool: str, ids: st.SearchStrategy[str]) -> Any:
    """Arguments that start valid and are then broken in one or a few ways."""
    schema = catalog()[tool]
    base: dict[str, Any] = draw(from_schema(schema, ids))
    names = sorted(schema.get("properties", {}))
    items = list(base.items())
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["retype", "unknown", "drop", "duplicate", "whole"]))
        if how == "retype" and names:
            key = draw(st.sampled_from(names))
            items = [(k, v) for k, v in items if k != key] + [(key, draw(hostile_value))]
        elif how == "unknown":
            items.append((draw(odd_text), draw(any_json)))
        elif how == "drop" and items:
            items.pop(draw(st.integers(0, len(items) - 1)))
        elif how == "duplicate" and names:
            key = draw(st.sampled_from(names))
            items.append(
                (key, draw(st.one_of(from_schema(schema["properties"][key], ids), hostile_value)))
            )
        elif how == "whole":
            return draw(hostile_value)
    return Pairs(tuple(items))
