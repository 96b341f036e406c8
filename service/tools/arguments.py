"""Clear VALIDATION_ERROR messages for bad tool arguments, written from the catalog.

msgspec validates the arguments against each tool's params Struct and says what failed in
its own terms ("Expected `str` matching regex '^([0-9a-fA-F]{8}-…'"). An AI client needs the
argument's name, what it must be, and how to get a good value: this module turns msgspec's
failure into that, using the tool's inputSchema in elova-tools.json (enum, bounds, format)
for the message and the argument's description for the hint.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from service.contract.catalog_file import catalog_bytes

_AT = re.compile(r"^(?P<msg>.*?) - at `\$\.(?P<path>[^`.\[]*)[^`]*`$")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>.*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<name>.*)`$")
_GENERIC_HINT = (
    "Send only the arguments the tool's inputSchema declares, with their types and bounds."
)
_EXAMPLE_UUID = "11111111-1111-4111-8111-111111111111"


@functools.cache
def _input_schemas() -> dict[str, dict[str, Any]]:
    return {tool["name"]: tool["inputSchema"] for tool in json.loads(catalog_bytes())["tools"]}


def explain(tool: str, failure: str) -> tuple[str, str]:
    """(message, hint) for msgspec's validation failure of `tool`'s arguments."""
    schema = _input_schemas().get(tool, {})
    properties: dict[str, dict[str, Any]] = schema.get("properties", {})
    accepted = ", ".join(f"`{name}`" for name in properties) or "no arguments"
    if match := _UNKNOWN.match(failure):
        name = match.group("name")
        return f"Unknown argument `{name}`: {tool} accepts {accepted}.", _GENERIC_HINT
    if match := _MISSING.match(failure):
        name = match.group("name")
        prop = properties.get(name, {})
        return f"Missing required argument `{name}`.", prop.get("description", _GENERIC_HINT)
    if failure.startswith("Expected `object`"):
        return "The arguments must be a JSON object.", f"{tool} accepts {accepted}."
    at = _AT.match(failure)
    name = at.group("path") if at else _leading_name(failure, properties)
    argument = properties.get(name) if name else None
    if name is None or argument is None:
        return failure, _GENERIC_HINT
    return _requirement(name, argument), argument.get("description", _GENERIC_HINT)


def _leading_name(failure: str, properties: dict[str, dict[str, Any]]) -> str | None:
    """Errors raised in __post_init__ have no path; they start with the argument's name."""
    match = re.match(r"^`(?P<name>[^`]+)`", failure)
    return match.group("name") if match and match.group("name") in properties else None


def _requirement(name: str, prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return f"`{name}` must be one of: {', '.join(str(v) for v in prop['enum'])}."
    if prop.get("type") == "integer":
        return f"`{name}` must be a whole number from {prop['minimum']} to {prop['maximum']}."
    if prop.get("format") == "uuid":
        return f"`{name}` must be a UUID such as {_EXAMPLE_UUID}."
    if prop.get("type") == "string":
        low, high = prop.get("minLength", 0), prop.get("maxLength")
        size = f" of {low} to {high} characters" if high else ""
        return f"`{name}` must be a string{size}."
    return f"`{name}` has the wrong type or value."
