"""`elova-mcp --version` prints the installed package's version and exits 0 (issue 54: an
operator asking which release runs had no command to ask)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from service.__main__ import main

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_console_script_prints_the_version() -> None:
    script = Path(sys.executable).with_name("elova-mcp")
    done = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"elova-mcp {VERSION}\n", "")


def test_main_exits_zero_without_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"elova-mcp {VERSION}\n"
