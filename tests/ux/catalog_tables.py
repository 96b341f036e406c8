"""The argument and result tables of docs/tools.md, rendered from the catalog `tools/list`
serves (service/contract/elova-tools.json), so the tool reference cannot drift from it.

docs/tools.md holds the prose; between the markers

    <!-- generated: get_workspace arguments -->  …  <!-- end generated -->
    <!-- generated: get_workspace results -->    …  <!-- end generated -->

this module writes the tables. `python -m tests.ux.catalog_tables` rewrites them in place;
`--check` exits 1 when the file differs from what the catalog gives
(tests/ux/test_tools_doc.py runs the same check).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "service" / "contract" / "elova-tools.json"
TOOLS_DOC = ROOT / "docs" / "tools.md"

Schema = dict[str, Any]

BLOCK = re.compile(
    r"(<!-- generated: (?P<tool>[a-z_]+) (?P<part>arguments|results) -->\n)"
    r"(?P<body>.*?)"
    r"(<!-- end generated -->)",
    re.S,
)

SAFE_INTEGER = 9007199254740991
# Patterns of the catalog, said in words (anything else is shown as the regex itself).
PATTERN_WORDS = {
    "^([0-9a-fA-F]{8}-": "",  # UUIDs: the type column says UUID
    "^[^\\u0000-\\u001f\\u007f-\\u009f]+$": "no control characters (C0, DEL, C1)",
    "^[^\\u0000-\\u001f\\u007f]+$": "no C0 control characters or DEL",
    "^(?:(?:\\d\\d[2468]": "",  # date-time: the type column says instant
    "^(?:0|[1-9]\\d{0,37})(?:\\.\\d{1,18})?$": (
        "exact decimal: up to 38 integer and 18 fractional digits"
    ),
}


def load_catalog() -> list[Schema]:
    tools: list[Schema] = json.loads(CATALOG.read_text(encoding="utf-8"))["tools"]
    return tools


def _alternatives(schema: Schema) -> list[Schema]:
    if "anyOf" in schema:
        return [alt for option in schema["anyOf"] for alt in _alternatives(option)]
    kinds = schema.get("type")
    if isinstance(kinds, list):
        return [{**schema, "type": kind} for kind in kinds]
    return [schema]


def _type_name(schema: Schema) -> str:
    kind = schema.get("type", "any")
    if kind == "string" and schema.get("format") == "uuid":
        return "UUID"
    if kind == "string" and schema.get("format") == "date-time":
        return "instant"
    if kind == "array":
        items = _alternatives(schema.get("items", {}))
        inner = " or ".join(dict.fromkeys(_type_name(item) for item in items))
        return "array of objects" if inner == "object" else f"array of {inner}"
    return str(kind)


def _number(value: float) -> str:
    if value == SAFE_INTEGER:
        return "2^53−1"
    return str(int(value)) if float(value).is_integer() else str(value)


def _values(schema: Schema) -> list[str]:
    """What one (non-null) alternative allows, in words."""
    out: list[str] = []
    if "const" in schema:
        out.append(f"always `{json.dumps(schema['const'])}`")
    if "enum" in schema:
        out.append(", ".join(f"`{value}`" for value in schema["enum"]))
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        out.append(
            f"≥ {_number(low)}" if high == SAFE_INTEGER else f"{_number(low)}–{_number(high)}"
        )
    elif low is not None:
        out.append(f"≥ {_number(low)}")
    if "minLength" in schema or "maxLength" in schema:
        low_len, high_len = schema.get("minLength", 0), schema.get("maxLength")
        out.append(
            f"{low_len}–{high_len} characters"
            if high_len is not None
            else f"≥ {low_len} characters"
        )
    if "maxItems" in schema:
        out.append(f"at most {schema['maxItems']} items")
    pattern = schema.get("pattern")
    if pattern is not None:
        words = next((w for start, w in PATTERN_WORDS.items() if pattern.startswith(start)), None)
        if words is None:
            out.append(f"pattern `{pattern}`")
        elif words:
            out.append(words)
    if "default" in schema:
        out.append(f"default `{json.dumps(schema['default'])}`")
    return out


def describe(schema: Schema) -> tuple[str, str]:
    """(type, values) of a schema in words: `UUID or null`, `1–50, default 50`."""
    alternatives = _alternatives(schema)
    names: list[str] = []
    values: list[str] = []
    for alt in alternatives:
        name = _type_name(alt)
        if name not in names:
            names.append(name)
        values.extend(v for v in _values(alt) if v not in values)
    return " or ".join(names), "; ".join(values)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def argument_rows(tool: Schema) -> list[tuple[str, str, str, str]]:
    """(argument, type, required, values) for each argument, in catalog order."""
    schema = tool["inputSchema"]
    required = set(schema.get("required", []))
    rows = []
    for name, prop in schema.get("properties", {}).items():
        kind, values = describe(prop)
        rows.append((name, kind, "yes" if name in required else "no", values))
    return rows


def result_rows(tool: Schema) -> list[tuple[str, str, str, str]]:
    """(field path, type, required, values) for every result field, depth first."""
    return list(_fields(tool["outputSchema"], ""))


def _fields(schema: Schema, prefix: str) -> Iterator[tuple[str, str, str, str]]:
    required = set(schema.get("required", []))
    for name, prop in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        kind, values = describe(prop)
        yield path, kind, "yes" if name in required else "no", values
        for alt in _alternatives(prop):
            if alt.get("type") == "object":
                yield from _fields(alt, f"{path}.")
            elif alt.get("type") == "array":
                items = alt.get("items", {})
                for item in _alternatives(items):
                    if item.get("type") == "object":
                        yield from _fields(item, f"{path}[].")


def render(tool: Schema, part: str) -> str:
    if part == "arguments":
        rows = argument_rows(tool)
        if not rows:
            return "No arguments.\n"
        head = "| Argument | Type | Required | Values |\n| --- | --- | --- | --- |\n"
    else:
        rows = result_rows(tool)
        head = "| Field | Type | Required | Values |\n| --- | --- | --- | --- |\n"
    lines = [
        f"| `{name}` | {_cell(kind)} | {req} | {_cell(values)} |"
        for name, kind, req, values in rows
    ]
    return head + "\n".join(lines) + "\n"


def regenerate(text: str, tools: list[Schema]) -> str:
    """The document with every generated block rendered again from the catalog."""
    by_name = {tool["name"]: tool for tool in tools}

    def block(match: re.Match[str]) -> str:
        tool = by_name.get(match.group("tool"))
        if tool is None:
            raise KeyError(f"docs/tools.md names a tool the catalog lacks: {match.group('tool')}")
        return match.group(1) + render(tool, match.group("part")) + match.group(5)

    return BLOCK.sub(block, text)


def main(argv: list[str]) -> int:
    text = TOOLS_DOC.read_text(encoding="utf-8")
    fresh = regenerate(text, load_catalog())
    if "--check" in argv:
        if fresh != text:
            print("docs/tools.md differs from the catalog: run python -m tests.ux.catalog_tables")
            return 1
        return 0
    if fresh != text:
        TOOLS_DOC.write_text(fresh, encoding="utf-8")
        print("docs/tools.md: tables rewritten from the catalog")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
