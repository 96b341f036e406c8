"""The rewrite of section references (tests/ux/rewrite_shared_refs.py): which doc each
section becomes, ranges and lists, references split across a line, re-wrapping, and that a
second run changes nothing."""

from __future__ import annotations

import pytest

from tests.ux.rewrite_shared_refs import NAME, files, rewrite_text, wrap_long_lines

pytestmark = pytest.mark.unit

S = NAME  # the name is assembled so that this file is not itself a reference


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (f"limits ({S} §7).", "limits (docs/limits.md)."),
        (f"format ({S} §1)", "format (docs/snapshot-format.md)"),
        (f"rules ({S} §2 and §9)", "rules (docs/reading-rules.md)"),
        (f"({S} §3, §9)", "(docs/reading-rules.md)"),
        (f"{S} §4, §5 and §9 through", "docs/tools.md and docs/reading-rules.md through"),
        (
            f"{S} §1, §6 and §8",
            "docs/snapshot-format.md, docs/authorization.md and docs/protocol.md",
        ),
        (f"({S}.md §1–§3)", "(docs/snapshot-format.md and docs/reading-rules.md)"),
        (f"{S} §4/§8 leave", "docs/tools.md and docs/protocol.md leave"),
        (f"Error precedence ({S} §9): scope", "Error precedence (docs/tools.md, Errors): scope"),
        (
            f"in the order of {S}\n§9: the caller",
            "in the order of docs/tools.md, Errors: the caller",
        ),
        (f"# see {S}\n# §6 here", "# see docs/authorization.md here"),
        ("and the §9 fine print on", "and the fine print on"),
        ("nothing to do here", "nothing to do here"),
    ],
)
def test_rewrites(before: str, after: str) -> None:
    assert rewrite_text(before) == after
    assert rewrite_text(after) == after  # idempotent


def test_lengthened_lines_are_rewrapped_into_their_paragraph() -> None:
    first = f'    """Loading a snapshot file ({S} §1): one JSON object of record arrays, upserted'
    before = first + ' by id\n    inside one transaction.\n    """\n'
    after = wrap_long_lines(before, rewrite_text(before))
    lines = after.splitlines()
    assert len(lines) == 3 and all(len(line) <= 100 for line in lines)
    assert lines[1].startswith("    ") and lines[1].endswith("inside one transaction.")
    assert after.split() == rewrite_text(before).split()  # the same words, in order
    assert wrap_long_lines(after, rewrite_text(after)) == after


def test_a_comment_wraps_onto_a_new_comment_line_before_code() -> None:
    comment = f"# durationMs ({S} §9): whole milliseconds rounded down, null when negative"
    before = comment + " or missing.\nx = 1\n"
    lines = wrap_long_lines(before, rewrite_text(before)).splitlines()
    assert lines[0].startswith("# durationMs (docs/reading-rules.md): ")
    assert lines[1:] == ["# missing.", "x = 1"]


def test_lines_that_were_long_already_are_left_alone() -> None:
    long_line = "x" * 120 + "\n"
    assert wrap_long_lines(long_line, long_line) == long_line


def test_migrations_and_the_script_itself_are_never_rewritten() -> None:
    names = {p.as_posix() for p in files()}
    assert not any("/store/migrations/" in n for n in names)
    assert not any(n.endswith("shared_refs.py") for n in names)
    assert any(n.endswith("service/rules/history.py") for n in names)
