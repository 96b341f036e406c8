"""`elova-mcp serve --help` lists the settings by group and where each group is documented:
every setting of README's Configuration table belongs to a group, and each group's page and
heading exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from service.__main__ import main
from service.cli.serve import SETTING_GROUPS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_readme_setting_is_in_a_group() -> None:
    table = (ROOT / "README.md").read_text().split("## Configuration", 1)[1]
    names = set(re.findall(r"^\| `((?:ELOVA|OTEL)_[A-Z0-9_]+)`", table, re.M))
    names |= set(re.findall(r"^\| `[A-Z0-9_]+` / `((?:ELOVA|OTEL)_[A-Z0-9_]+)`", table, re.M))
    assert len(names) > 50
    prefixes = [p for _, group, _ in SETTING_GROUPS for p in group]
    assert not sorted(n for n in names if not any(n.startswith(p) for p in prefixes))


def test_each_group_points_at_a_page_and_heading_that_exist() -> None:
    for _, _, doc in SETTING_GROUPS:
        path, _, fragment = doc.partition("#")
        text = (ROOT / path).read_text()
        headings = {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
        assert not fragment or fragment in headings, doc


def test_serve_help_shows_the_groups(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    for title, _, doc in SETTING_GROUPS:
        assert title in out and doc in out
    assert max(len(line) for line in out.splitlines()) <= 100
