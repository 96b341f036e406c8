"""Rewrite references to the team's reference folder (`SEMANTICS §N`, the spec copy) in the
comments and docstrings of service/ and tests/ to the repository's own docs.

    python -m tests.ux.rewrite_shared_refs          # rewrite, printing every change
    python -m tests.ux.rewrite_shared_refs --check  # print what would change; exit 1 if any

Idempotent: a second run finds nothing. Lines the longer names push past 100 characters are
wrapped (comments and docstrings keep their prefix and indentation), so `ruff` stays quiet.
Test code that reads the reference folder on purpose (the catalog identity tests) is left
alone: only the section references and the phrases in PHRASES are rewritten.
tests/ux/test_no_shared_refs.py checks README.md, docs/ and service/ afterwards.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("service", "tests")
SUFFIXES = {".py", ".sql", ".lua", ".html", ".md", ".txt", ".cfg", ".toml", ".yaml"}
# This script and its tests hold the patterns as data.
SELF = {
    (Path(__file__).parent / name).resolve()
    for name in ("rewrite_shared_refs.py", "test_no_shared_refs.py", "test_rewrite_shared_refs.py")
}
# Applied migrations are checksummed (service/store/migrate.py): editing even a comment of one
# would stop `migrate` on every existing database, so they keep their words.
MIGRATIONS = ROOT / "service" / "store" / "migrations"
LINE_LIMIT = 100

# Where each section of the team's semantics notes lives in this repository.
SECTION_DOCS = {
    1: "docs/snapshot-format.md",
    2: "docs/reading-rules.md",
    3: "docs/reading-rules.md",
    4: "docs/tools.md",
    5: "docs/reading-rules.md",
    6: "docs/authorization.md",
    7: "docs/limits.md",
    8: "docs/protocol.md",
    9: "docs/reading-rules.md",
}
NAME = "SEMANTICS"  # kept apart so that reading this file is not a reference itself
# `SEMANTICS §2`, `SEMANTICS.md §1–§3, §5 and §9`, `SEMANTICS §4/§8`, across a line break.
_SECTION = r"§\d+(?:\s*[–-]\s*§?\d+)?"
REFERENCE = re.compile(
    NAME
    + r"(?:\.md)?(?:\s*\n\s*(?:#|--)?\s*|\s+)"
    + rf"(?P<sections>{_SECTION}(?:(?:\s*,\s*|\s+and\s+|\s*/\s*){_SECTION})*)"
)
# Error precedence is written down with the errors, not with the reading rules.
PRECEDENCE = re.compile(
    r"(?P<lead>(?:[Ee]rror precedence|the order of)\s*\(?)" + NAME + r"\s+§9(?P<tail>\)?)"
)
# Whole phrases that point at the reference folder's copy of the catalog.
PHRASES = {
    "and the §9 fine print": "and the fine print",
    "The file beside this module is a copy of the product contract (spec/elova-tools.json);": (
        "The file beside this module is the product contract (docs/tools.md documents it);"
    ),
    "# The repository's copy of the product contract (identical to shared/spec/"
    "elova-tools.json).": "# The product contract as `tools/list` serves it (docs/tools.md).",
}


def _numbers(sections: str) -> list[int]:
    out: list[int] = []
    for match in re.finditer(r"§(\d+)(?:\s*[–-]\s*§?(\d+))?", sections):
        first = int(match.group(1))
        last = int(match.group(2) or first)
        out.extend(range(first, last + 1))
    return out


def _docs_for(sections: str) -> str:
    docs = list(dict.fromkeys(SECTION_DOCS[n] for n in _numbers(sections) if n in SECTION_DOCS))
    if len(docs) <= 2:
        return " and ".join(docs)
    return ", ".join(docs[:-1]) + " and " + docs[-1]


def rewrite_text(text: str) -> str:
    text = PRECEDENCE.sub(
        lambda m: f"{m.group('lead')}docs/tools.md, Errors{m.group('tail')}", text
    )
    text = REFERENCE.sub(lambda m: _docs_for(m.group("sections")), text)
    for old, new in PHRASES.items():
        text = text.replace(old, new)
    return text


_PREFIX = re.compile(r"^(?P<indent>\s*)(?P<mark>#+ |-- )?")
_NEW_ITEM = re.compile(r"^(?:[-*] |\d+\. |\"\"\"|\'\'\'|$)")


def _lead(line: str) -> str:
    match = _PREFIX.match(line)
    assert match is not None
    return match.group("indent") + (match.group("mark") or "")


def _continues(line: str, lead: str) -> bool:
    """Whether `line` continues the paragraph of a line whose prefix is `lead`."""
    return _lead(line) == lead and not _NEW_ITEM.match(line[len(lead) :])


def wrap_long_lines(before: str, after: str) -> str:
    """Re-wrap lines that the rewrite pushed past the limit: the words beyond it move to the
    start of the next line when that line continues the same comment or docstring paragraph
    (and so on down), else onto a new line with the same indentation and comment mark.
    Lines that were already long, and lines the rewrite did not touch, are kept."""
    old_lines = set(before.splitlines())
    lines = after.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if len(line) > LINE_LIMIT and line not in old_lines:
            lead = _lead(line)
            cut = line.rfind(" ", len(lead) + 1, LINE_LIMIT + 1)
            if cut > len(lead):
                rest = line[cut + 1 :]
                lines[i] = line[:cut]
                following = lines[i + 1] if i + 1 < len(lines) else None
                if following is not None and _continues(following, lead):
                    lines[i + 1] = lead + rest + " " + following[len(lead) :]
                    old_lines.discard(lines[i + 1])
                else:
                    lines.insert(i + 1, lead + rest)
        i += 1
    ending = "\n" if after.endswith("\n") else ""
    return "\n".join(lines) + ending


def files() -> list[Path]:
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file() or path.resolve() in SELF:
                continue
            if path.is_relative_to(MIGRATIONS):
                continue
            found.append(path)
    return found


def _changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    """Pairs of (old, new) line runs, for the report."""
    import difflib

    pairs = []
    old, new = before.splitlines(), after.splitlines()
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            pairs.append(("\n".join(old[i1:i2]), "\n".join(new[j1:j2])))
    return pairs


def main(argv: list[str]) -> int:
    check = "--check" in argv
    changed = 0
    for path in files():
        try:
            before = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        after = wrap_long_lines(before, rewrite_text(before))
        if after == before:
            continue
        changed += 1
        name = path.relative_to(ROOT)
        for old, new in _changed_lines(before, after):
            print(f"{name}:\n  - {old.strip()}\n  + {new.strip()}")
        if not check:
            path.write_text(after, encoding="utf-8")
    verb = "would change" if check else "changed"
    print(f"{changed} files {verb}")
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
