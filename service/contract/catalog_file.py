"""elova-tools.json as the service reads it: the file's bytes, and its tools' names in the
catalog's order (the metrics' tool labels, the argument errors, `tools/list`)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

CATALOG_FILE = "elova-tools.json"


@cache
def catalog_bytes() -> bytes:
    return resources.files("service.contract").joinpath(CATALOG_FILE).read_bytes()


def tool_names() -> tuple[str, ...]:
    return tuple(tool["name"] for tool in json.loads(catalog_bytes())["tools"])
