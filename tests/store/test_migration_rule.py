"""The expand-then-contract rule (docs/decisions/migrations.md), checked on the SQL itself.

A migration from `RULE_FROM` on may not do, unmarked, what breaks the previous release while
it still serves (a contract step: drop, rename, change a type, make a column NOT NULL, add a
NOT NULL column without a default) or what holds a table lock for longer than a moment
(build an index on an existing table without CONCURRENTLY, add a CHECK or FOREIGN KEY to an
existing table without NOT VALID, rewrite a table for a volatile default, LOCK TABLE), nor
what the runner cannot run safely (CONCURRENTLY inside a transaction or without IF [NOT]
EXISTS, more than one statement outside a transaction). Two
markers in the file let a finding through, each with its reason written down:

    -- contract: safe after release 0.4.0 (no release from 0.4.0 on reads workspaces.name)
    -- reviewed: widens a CHECK on oauth_clients, a table of a few hundred rows

A contract step names the release from which no code uses what it removes; it may ship only
in a later release (the project's version, pyproject.toml, must be past the one named).
Migrations before `RULE_FROM` were released before the rule was written: their findings are
listed here once and frozen (an applied migration cannot change: its checksum is checked).

Statements are found by patterns on the SQL with comments, quoted strings and dollar-quoted
bodies taken out: cheap, and wrong only towards caution (a false finding asks for a marker).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from service.store.migrate import Migration, available

pytestmark = pytest.mark.unit

RULE_FROM = 22  # 0001-0021 were released before this rule existed
ROOT = Path(__file__).resolve().parents[2]

CONTRACT_MARK = re.compile(r"^-- contract: safe after release (\d+(?:\.\d+)*) \(\S.*\)\s*$", re.M)
REVIEWED_MARK = re.compile(r"^-- reviewed: \S.{9,}$", re.M)

_WORD = r'(?:"[^"]+"|[\w.]+)'
CONTRACT_STEPS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("drop", re.compile(r"\bDROP\b(?!\s+NOT\s+NULL)")),
    ("rename", re.compile(r"\bRENAME\b")),
    ("type change", re.compile(rf"\bALTER\s+(?:COLUMN\s+)?{_WORD}\s+(?:SET\s+DATA\s+)?TYPE\b")),
    ("set not null", re.compile(r"\bSET\s+NOT\s+NULL\b")),
    ("not null column without default",
     re.compile(r"\bADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?(?:(?!\bDEFAULT\b)[^,])*"
                r"\bNOT\s+NULL\b(?:(?!\bDEFAULT\b)[^,])*(?:,|$)")),
)  # fmt: skip
_INDEX = re.compile(
    rf"\bCREATE\s+(?:UNIQUE\s+)?INDEX\s+(?!CONCURRENTLY\b)(?:IF\s+NOT\s+EXISTS\s+)?"
    rf"(?:{_WORD}\s+)?ON\s+(?:ONLY\s+)?({_WORD})"
)
_ALTER = re.compile(rf"^ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?({_WORD})")
_UNGUARDED_CONCURRENTLY = re.compile(
    r"\b(?:CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?!IF\s+NOT\s+EXISTS\b)"
    r"|DROP\s+INDEX\s+CONCURRENTLY\s+(?!IF\s+EXISTS\b))"
)
_VALIDATED = re.compile(r"\bADD\s+(?:CONSTRAINT\s+\S+\s+)?(?:CHECK|FOREIGN\s+KEY)\b")
_VOLATILE_DEFAULT = re.compile(r"\bDEFAULT\s+(?:gen_random_uuid|random|clock_timestamp)\s*\(", re.I)
# Left to right, so that a quote inside a comment or a `--` inside a string is no surprise.
_NOT_SQL = re.compile(r"\$(\w*)\$.*?\$\1\$|'(?:[^']|'')*'|--[^\n]*|/\*.*?\*/", re.S)
_CREATED = re.compile(rf"\bCREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?({_WORD})")


def statements(sql: str) -> list[str]:
    """The statements of a migration, upper-cased, without comments, strings or bodies."""
    text = _NOT_SQL.sub(lambda m: "''" if m.group(0).startswith("'") else " ", sql)
    found = (" ".join(part.split()).upper() for part in text.split(";"))
    return [s for s in found if s]


def findings(mig: Migration) -> list[tuple[str, str]]:
    """(kind, what) of every statement the rule asks about: kind is contract or lock."""
    found: list[tuple[str, str]] = []
    parts = statements(mig.sql)
    created = {m.group(1) for s in parts for m in _CREATED.finditer(s)}
    for statement in parts:
        found += [("contract", what) for what, step in CONTRACT_STEPS if step.search(statement)]
        index = _INDEX.search(statement)
        if index and index.group(1) not in created:
            found.append(("lock", f"index on {index.group(1).lower()} without CONCURRENTLY"))
        altered = _ALTER.search(statement)
        if altered and altered.group(1) not in created:
            if _VALIDATED.search(statement) and "NOT VALID" not in statement:
                found.append(("lock", f"constraint on {altered.group(1).lower()} validated"))
            if _VOLATILE_DEFAULT.search(statement):
                found.append(("lock", f"{altered.group(1).lower()} rewritten for a default"))
        if statement.startswith("LOCK "):
            found.append(("lock", "LOCK TABLE"))
        if "CONCURRENTLY" in statement and mig.in_transaction:
            found.append(("runner", "CONCURRENTLY needs '-- migrate: outside a transaction'"))
        if _UNGUARDED_CONCURRENTLY.search(statement):
            found.append(("runner", "CONCURRENTLY without IF [NOT] EXISTS: a second runner fails"))
    if not mig.in_transaction and len(parts) != 1:
        found.append(("runner", "outside a transaction, a migration is one statement"))
    return found


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.split("."))


def project_version() -> tuple[int, ...]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return _version(tomllib.load(f)["project"]["version"])


NEEDS_CONTRACT = (
    "a contract step needs '-- contract: safe after release X.Y.Z (why)' naming the release "
    "from which no code uses what it removes"
)
NEEDS_LESS_LOCK = (
    "readers or writers wait for it: build it CONCURRENTLY / NOT VALID, or say why it is "
    "brief in '-- reviewed: ...'"
)


def refusals(mig: Migration) -> list[str]:
    """Why the rule refuses this migration (nothing when it follows it)."""
    found = findings(mig)
    contract = CONTRACT_MARK.search(mig.sql)
    reviewed = REVIEWED_MARK.search(mig.sql) is not None
    refused = [f"{mig.name}: {what} ({kind})" for kind, what in found if kind == "runner"]
    for kind, what in found:
        if kind == "contract" and contract is None and not reviewed:
            refused.append(f"{mig.name}: {what}: {NEEDS_CONTRACT}")
        if kind == "lock" and not reviewed:
            refused.append(f"{mig.name}: {what}: {NEEDS_LESS_LOCK}")
    if contract is not None and not _version(contract.group(1)) < project_version():
        refused.append(f"{mig.name}: a contract step after release {contract.group(1)} ships "
                       "in a later release: raise the version in pyproject.toml")  # fmt: skip
    return refused


def test_every_migration_since_the_rule_follows_it() -> None:
    newer = [m for m in available() if m.version >= RULE_FROM]
    assert [r for m in newer for r in refusals(m)] == []


# What the migrations released before the rule do that it asks about (frozen: see above).
BEFORE_THE_RULE = {
    # Built while nothing served yet; on a served database each would hold off the loader's
    # writes for the whole build (SHARE lock): the rule asks for CONCURRENTLY instead.
    "0004_inventory_indexes.sql": [("lock", "index on workflows without CONCURRENTLY")],
    "0006_execution_filter_orders.sql": [("lock", "index on executions without CONCURRENTLY")] * 2,
    "0007_execution_stats_indexes.sql": [("lock", "index on executions without CONCURRENTLY")] * 2,
    # Dropped 0007's index in the release that stopped using it (the rule: one release later).
    "0008_execution_dated_order.sql": [
        ("lock", "index on executions without CONCURRENTLY"), ("contract", "drop")],
    # Widened a CHECK: compatible, a brief lock on small tables (the rule: a '-- reviewed').
    "0010_oauth.sql": [("contract", "drop"), ("lock", "constraint on approvals validated")],
    "0011_metadata_clients.sql": [
        ("contract", "drop"), ("lock", "constraint on oauth_clients validated")],
}  # fmt: skip


def test_the_migrations_before_the_rule_are_known() -> None:
    older = {m.name: findings(m) for m in available() if m.version < RULE_FROM}
    assert {name: found for name, found in older.items() if found} == BEFORE_THE_RULE


def _mig(sql: str) -> Migration:
    return Migration(RULE_FROM, f"{RULE_FROM:04d}_case.sql", sql)


@pytest.mark.parametrize(
    ("sql", "kinds"),
    [
        # Expand steps: nothing to say.
        ("CREATE TABLE t (id int PRIMARY KEY, v text NOT NULL);\nCREATE INDEX t_v ON t (v);", []),
        ("ALTER TABLE approvals ADD COLUMN note text;", []),
        ("ALTER TABLE approvals ADD COLUMN n int NOT NULL DEFAULT 0;", []),
        ("ALTER TABLE approvals ADD COLUMN a int, ADD COLUMN b int DEFAULT 1 NOT NULL;", []),
        ("ALTER TABLE approvals ALTER COLUMN note DROP NOT NULL;", []),
        ("ALTER TABLE approvals ADD CONSTRAINT c CHECK (n >= 0) NOT VALID;", []),
        ("ALTER TABLE approvals VALIDATE CONSTRAINT c;", []),
        ("CREATE OR REPLACE FUNCTION f(a uuid) RETURNS int LANGUAGE sql AS $f$ SELECT 1 $f$;",
         []),
        ("-- migrate: outside a transaction\n"
         "CREATE INDEX CONCURRENTLY IF NOT EXISTS e_x ON executions (x);", []),
        ("COMMENT ON TABLE approvals IS 'we never DROP or RENAME this';", []),
        ("CREATE FUNCTION f() RETURNS void LANGUAGE sql AS $$ DROP TABLE x $$;", []),
        # Contract steps.
        ("DROP TABLE old_things;", ["contract"]),
        ("ALTER TABLE approvals DROP COLUMN note;", ["contract"]),
        ("ALTER TABLE approvals DROP note;", ["contract"]),
        ("ALTER TABLE approvals ALTER COLUMN note DROP DEFAULT;", ["contract"]),
        ("DROP FUNCTION approval_state(uuid);", ["contract"]),
        ("ALTER TABLE workspaces RENAME COLUMN name TO title;", ["contract"]),
        ("ALTER TABLE workspaces RENAME TO spaces;", ["contract"]),
        ("ALTER TABLE approvals ALTER COLUMN note TYPE varchar(10);", ["contract"]),
        ("ALTER TABLE approvals ALTER note SET DATA TYPE varchar(10);", ["contract"]),
        ("ALTER TABLE approvals ALTER COLUMN note SET NOT NULL;", ["contract"]),
        ("ALTER TABLE approvals ADD COLUMN n int NOT NULL;", ["contract"]),
        # Long locks.
        ("CREATE INDEX e_x ON executions (x);", ["lock"]),
        ("CREATE UNIQUE INDEX IF NOT EXISTS e_x ON ONLY executions (x);", ["lock"]),
        ("ALTER TABLE approvals ADD CONSTRAINT c CHECK (n >= 0);", ["lock"]),
        ("ALTER TABLE codes ADD FOREIGN KEY (a) REFERENCES approvals (id);", ["lock"]),
        ("ALTER TABLE approvals ADD COLUMN k uuid DEFAULT gen_random_uuid();", ["lock"]),
        ("LOCK TABLE approvals IN ACCESS EXCLUSIVE MODE;", ["lock"]),
        # What the runner cannot run.
        ("CREATE INDEX CONCURRENTLY IF NOT EXISTS e_x ON executions (x);", ["runner"]),
        ("-- migrate: outside a transaction\nCREATE INDEX CONCURRENTLY e_x ON executions (x);",
         ["runner"]),
        ("-- migrate: outside a transaction\nDROP INDEX CONCURRENTLY e_x;",
         ["contract", "runner"]),
        ("-- migrate: outside a transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS a ON t (a);"
         "\nCREATE INDEX CONCURRENTLY IF NOT EXISTS b ON t (b);", ["runner"]),
    ],
)  # fmt: skip
def test_what_the_rule_asks_about(sql: str, kinds: list[str]) -> None:
    assert [kind for kind, _ in findings(_mig(sql))] == kinds


def test_markers_let_a_finding_through_with_its_reason() -> None:
    drop = "ALTER TABLE workspaces DROP COLUMN legacy;\n"
    assert refusals(_mig(drop)) != []
    assert refusals(_mig("-- contract: safe after release 0.0.1 (0.0.1 stopped reading it)\n"
                         + drop)) == []  # fmt: skip
    later = refusals(_mig("-- contract: safe after release 99.0.0 (not yet)\n" + drop))
    assert len(later) == 1 and "raise the version" in later[0]
    assert refusals(_mig("-- contract: safe after release 0.0.1\n" + drop)) != []  # no reason
    index = "CREATE INDEX w_x ON workspaces (x);\n"
    assert refusals(_mig(index)) != []
    assert (
        refusals(_mig("-- reviewed: workspaces holds a few hundred rows at most\n" + index)) == []
    )
    assert refusals(_mig("-- reviewed: small\n" + index)) != []  # a reason, not a word
