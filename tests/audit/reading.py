"""Reading an audit stream in tests: its lines, each validated against the JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from service.audit.events import SCHEMA

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs/audit/audit-event.v1.schema.json"
VALIDATOR = Draft202012Validator(
    json.loads(SCHEMA_FILE.read_text()), format_checker=FormatChecker()
)


def audit_lines(text: str) -> list[dict[str, Any]]:
    """The audit lines of a stream (a stdout may carry request-log lines too), each checked
    against the schema (jsonschema raises on the first violation)."""
    found = []
    for raw in text.splitlines():
        if f'"schema":"{SCHEMA}"' not in raw:
            continue
        line = json.loads(raw)
        VALIDATOR.validate(line)
        found.append(line)
    return found


def of_type(lines: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [line for line in lines if line["type"] == kind]
