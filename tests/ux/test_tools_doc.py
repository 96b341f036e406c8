"""docs/tools.md is the tool reference `tools/list` serves: one section a catalog tool, in
catalog order, whose generated tables name exactly the catalog's arguments and result fields
with the same required flags, and nothing the catalog lacks."""

from __future__ import annotations

import re

import pytest

from service.mcp.catalog import Catalog
from tests.ux import catalog_tables

pytestmark = pytest.mark.unit

DOC = catalog_tables.TOOLS_DOC


def sections() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {part.split("\n", 1)[0].strip(): part for part in parts}


def table(section: str, part: str) -> dict[str, str]:
    """Name → Required column of one generated table of a tool's section."""
    match = re.search(
        rf"<!-- generated: [a-z_]+ {part} -->\n(.*?)<!-- end generated -->", section, re.S
    )
    assert match, f"no generated {part} table"
    rows = {}
    for line in match.group(1).splitlines()[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        rows[cells[0].strip("`")] = cells[2]
    return rows


def test_generated_tables_match_the_catalog() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert catalog_tables.regenerate(text, catalog_tables.load_catalog()) == text, (
        "docs/tools.md drifted from service/contract/elova-tools.json: "
        "run `python -m tests.ux.catalog_tables`"
    )


def test_one_section_a_served_tool_in_catalog_order() -> None:
    served = Catalog.load().names
    documented = [name for name in sections() if name.startswith("get_")]
    assert tuple(documented) == served


def test_arguments_and_required_flags_are_the_served_ones() -> None:
    docs = sections()
    for tool in Catalog.load().tools:
        schema = tool.input_schema
        required = set(schema.get("required", []))
        rows = table(docs[tool.name], "arguments")
        assert set(rows) == set(schema["properties"]), tool.name
        for name, flag in rows.items():
            assert flag == ("yes" if name in required else "no"), f"{tool.name}.{name}"


def test_top_level_result_fields_and_required_flags_are_the_served_ones() -> None:
    docs = sections()
    for tool in Catalog.load().tools:
        schema = tool.output_schema
        rows = table(docs[tool.name], "results")
        top = {name: flag for name, flag in rows.items() if "." not in name}
        assert set(top) == set(schema["properties"]), tool.name
        required = set(schema["required"])
        for name, flag in top.items():
            assert flag == ("yes" if name in required else "no"), f"{tool.name} → {name}"


def test_the_overview_table_lists_every_tool_with_its_scope() -> None:
    text = DOC.read_text(encoding="utf-8")
    overview = text.split("\n## ", 1)[0]
    for name in Catalog.load().names:
        scope = "workspaces:read" if name in {"get_many_workspaces", "get_workspace"} else "n8n"
        assert re.search(rf"\[`{name}`\]\(#{name}\) \|[^\n]*`{scope}", overview), name


def test_the_check_mode_agrees() -> None:
    assert catalog_tables.main(["--check"]) == 0
