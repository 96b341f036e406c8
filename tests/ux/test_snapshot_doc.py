"""docs/snapshot-format.md is the format `elova-mcp load` reads: its example loads with the
real command (into a database of its own), and the page names exactly the fields the
loader's msgspec Structs accept — per array, with their required flags, types, allowed
values and numeric bounds — so the page cannot drift from the loader."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest
from msgspec import inspect as mi

from service.__main__ import main
from service.store import load_executions, load_inventory
from service.store.load_snapshot import _Document
from tests.support.services import TestDatabase, create_database, drop_database

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "snapshot-format.md"
EXAMPLE = ROOT / "docs" / "examples" / "snapshot.json"

# The Struct each snapshot array is decoded into, item by item.
RECORDS: dict[str, type[msgspec.Struct]] = {
    "accounts": load_inventory.AccountIn,
    "workspaces": load_inventory.WorkspaceIn,
    "instances": load_inventory.InstanceIn,
    "syncJobs": load_inventory.SyncJobIn,
    "workflows": load_inventory.WorkflowIn,
    "executions": load_executions.ExecutionIn,
}
SAFE_INTEGER = 2**53 - 1


def _structs(kind: mi.Type, suffix: str = "") -> Iterator[tuple[str, mi.StructType]]:
    """Structs reachable through unions and lists, with `[]` for each list level."""
    if isinstance(kind, mi.StructType):
        yield suffix, kind
    elif isinstance(kind, mi.UnionType):
        for option in kind.types:
            yield from _structs(option, suffix)
    elif isinstance(kind, mi.ListType):
        yield from _structs(kind.item_type, suffix + "[]")


def loader_fields(struct: type[msgspec.Struct]) -> dict[str, mi.Field]:
    """Every field path the loader accepts in one record: `syncState.pending`,
    `history.nodes[].runs[].usage[].inputTokens`."""
    out: dict[str, mi.Field] = {}

    def walk(info: mi.StructType, prefix: str) -> None:
        for field in info.fields:
            path = prefix + field.encode_name
            out[path] = field
            for suffix, inner in _structs(field.type):
                walk(inner, f"{path}{suffix}.")

    info = mi.type_info(struct)
    assert isinstance(info, mi.StructType)
    walk(info, "")
    return out


def doc_tables() -> dict[str, dict[str, list[str]]]:
    """Array → field path → the cells of its row, from each `## \\`array\\`` section."""
    text = DOC.read_text(encoding="utf-8")
    tables: dict[str, dict[str, list[str]]] = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        heading, _, body = part.partition("\n")
        name = re.fullmatch(r"`([A-Za-z]+)`", heading.strip())
        if not name:
            continue
        rows: dict[str, list[str]] = {}
        for line in body.splitlines():
            if not line.startswith("| `"):
                continue
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            rows[cells[0].strip("`")] = cells
        tables[name.group(1)] = rows
    return tables


def _leaves(kind: mi.Type) -> list[mi.Type]:
    if isinstance(kind, mi.UnionType):
        return [leaf for option in kind.types for leaf in _leaves(option)]
    return [kind]


def type_words(kind: mi.Type) -> set[str]:
    """The words the Type column must use for a field."""
    words: set[str] = set()
    for leaf in _leaves(kind):
        if isinstance(leaf, mi.LiteralType):
            words.add("integer" if isinstance(leaf.values[0], int) else "string")
        elif isinstance(leaf, mi.ListType):
            words |= {"array"} | type_words(leaf.item_type)  # `array of objects`
        else:
            words.add(
                {
                    mi.StrType: "string",
                    mi.IntType: "integer",
                    mi.FloatType: "number",
                    mi.BoolType: "boolean",
                    mi.DateTimeType: "instant",
                    mi.UUIDType: "UUID",
                    mi.ListType: "array",
                    mi.StructType: "object",
                    mi.NoneType: "null",
                }[type(leaf)]
            )
    return words


def constraints(kind: mi.Type) -> tuple[set[str], set[int | float]]:
    """(allowed literal values, numeric bounds) a field's row must state."""
    values: set[str] = set()
    bounds: set[int | float] = set()
    for leaf in _leaves(kind):
        if isinstance(leaf, mi.LiteralType):
            values.update(str(v) for v in leaf.values)
        if isinstance(leaf, mi.IntType | mi.FloatType):
            bounds.update(b for b in (leaf.ge, leaf.le) if b is not None)
        if isinstance(leaf, mi.StrType) and leaf.max_length is not None:
            bounds.add(leaf.max_length)
    return values, bounds


def test_the_arrays_are_the_loaders() -> None:
    arrays = [f.encode_name for f in mi.type_info(_Document).fields]  # type: ignore[attr-defined]
    assert sorted(arrays) == sorted(RECORDS)
    assert sorted(doc_tables()) == sorted(RECORDS)


@pytest.mark.parametrize("array", RECORDS)
def test_the_page_names_exactly_the_fields_the_loader_accepts(array: str) -> None:
    accepted = loader_fields(RECORDS[array])
    documented = doc_tables()[array]
    assert sorted(documented) == sorted(accepted), array
    for path, field in accepted.items():
        required = documented[path][2]
        assert required == ("yes" if field.required else "no"), f"{array}: {path}"


@pytest.mark.parametrize("array", RECORDS)
def test_types_values_and_bounds_match_the_loader(array: str) -> None:
    documented = doc_tables()[array]
    for path, field in loader_fields(RECORDS[array]).items():
        _, kind_cell, _, rules = documented[path]
        named = set(
            re.findall(r"UUID|string|integer|number|boolean|instant|array|object|null", kind_cell)
        )
        assert named == type_words(field.type), f"{array}: {path}: {kind_cell}"
        values, bounds = constraints(field.type)
        for value in values:
            assert f"`{value}`" in rules, f"{array}: {path} does not name `{value}`"
        for bound in bounds:
            shown = str(bound) in rules or (bound == SAFE_INTEGER and "2^53−1" in rules)
            assert shown, f"{array}: {path} does not state the bound {bound}"


def _paths(value: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield prefix + key
            yield from _paths(inner, f"{prefix}{key}.")
    elif isinstance(value, list):
        for item in value:
            yield from _paths(item, prefix[:-1] + "[]." if prefix else "")


def test_the_example_uses_every_field() -> None:
    example = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    for array, struct in RECORDS.items():
        used = {p for record in example[array] for p in _paths(record)}
        missing = set(loader_fields(struct)) - used
        assert not missing, f"docs/examples/snapshot.json: {array} never uses {sorted(missing)}"


@pytest.fixture(scope="module")
def own_database() -> Iterator[TestDatabase]:
    """The example has fixed ids and an email: a database of its own keeps it away from the
    suite's records (and theirs away from its checks)."""
    db = asyncio.run(create_database("elova_snapshot_doc"))
    yield db
    asyncio.run(drop_database(db))


def run_load(db: TestDatabase, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
    env["ELOVA_DATABASE_URL"] = db.dsn
    return subprocess.run(
        [sys.executable, "-m", "service", "load", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def _counts(dsn: str) -> dict[str, int]:
    conn = await asyncpg.connect(dsn)
    try:
        tables = ["accounts", "workspaces", "memberships", "instances", "sync_jobs"]
        tables += ["workflows", "executions"]
        return {t: await conn.fetchval(f"SELECT count(*) FROM {t}") for t in tables}
    finally:
        await conn.close()


def test_the_example_loads_with_the_real_command(own_database: TestDatabase) -> None:
    done = run_load(own_database, "docs/examples/snapshot.json")
    assert done.returncode == 0, done.stderr
    summary = (
        "docs/examples/snapshot.json: loaded 1 accounts, 1 workspaces (1 memberships), "
        "1 instances, 2 sync jobs, 2 workflows, 3 executions\n"
    )
    assert done.stdout == summary
    assert summary.strip() in DOC.read_text(encoding="utf-8"), "the page shows this line"
    counts = asyncio.run(_counts(own_database.dsn))
    assert counts == {
        "accounts": 1,
        "workspaces": 1,
        "memberships": 1,
        "instances": 1,
        "sync_jobs": 2,
        "workflows": 2,
        "executions": 3,
    }
    again = run_load(own_database, "docs/examples/snapshot.json")
    assert (again.returncode, again.stdout) == (0, summary)
    assert asyncio.run(_counts(own_database.dsn)) == counts


def test_a_documented_error_is_what_the_loader_says(
    own_database: TestDatabase, tmp_path: Path
) -> None:
    """The page's error line for an unknown field, reproduced: one line, exit 1."""
    example = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    workspace = {"id": "11111111-1111-4111-8111-111111111112", "name": "x", "timeZone": "UTC"}
    example["workspaces"].append({**workspace, "colour": 1})
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(example), encoding="utf-8")
    done = run_load(own_database, str(path))
    assert done.returncode == 1 and done.stdout == ""
    line = done.stderr.strip().replace(str(path), "snap.json")
    assert "\n" not in line
    assert line.replace("workspaces[1]", "workspaces[0]") in DOC.read_text(encoding="utf-8")


def test_load_help_points_to_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["load", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "docs/snapshot-format.md" in text and "docs/examples/snapshot.json" in text
    assert (ROOT / "docs" / "snapshot-format.md").exists()
