"""The repository carries its own contract: nothing in README.md, docs/ or service/ (code,
comments, docstrings, templates, SQL, Lua) points to the team's reference folder beside the
checkout, which a clone elsewhere does not have. The product docs under docs/ say it instead.
(Tests may still compare against that folder when it is there.)

`python -m tests.ux.rewrite_shared_refs` rewrites the section references in code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
NAME = "SEMANTICS"
FORBIDDEN = re.compile(r"\.\./shared\b|/work/shared\b|\bshared/spec/|\b" + NAME + r"\b")
# Files that must keep their bytes: each says why.
KEPT = {
    # Byte for byte the contract's catalog (tests/mcp compares them); its transcription notes
    # name the reference file it was made from.
    "service/contract/elova-tools.json",
    # Applied migrations are checksummed by `migrate`: editing a comment would stop it on
    # every existing database.
    "service/store/migrations/0001_records.sql",
}


def checked_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder in ("docs", "service"):
        files.extend(p for p in sorted((ROOT / folder).rglob("*")) if p.is_file())
    return [p for p in files if "__pycache__" not in p.parts]


def test_no_reference_leaves_the_repository() -> None:
    found = []
    for path in checked_files():
        name = path.relative_to(ROOT).as_posix()
        if name in KEPT:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # images and other binary files
        for number, line in enumerate(text.splitlines(), 1):
            if FORBIDDEN.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "references outside the repository:\n" + "\n".join(found)


def test_the_kept_files_exist() -> None:
    """An exemption for a file that is gone would hide nothing but rot."""
    for name in KEPT:
        assert (ROOT / name).is_file(), name
