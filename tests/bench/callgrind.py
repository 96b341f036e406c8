"""valgrind's callgrind for the bench diagnostics (tests/bench/ablation.py,
tests/bench/refusal_cost.py): a command run under it with counting off at the start, the
switch a measured process flips around what it measures, and the instructions a dump holds.
Instruction counts repeat within about 0.5 % whatever else the machine does."""

from __future__ import annotations

import subprocess
from pathlib import Path


def under_callgrind(command: list[str], out: str | Path) -> list[str]:
    """`command` run under callgrind, counting nothing until `control` says so; `out` is
    its output file (`%p` in it stands for the process id)."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={out}", *command]  # fmt: skip


def control(pid: int, *steps: tuple[str, ...]) -> None:
    """callgrind_control's steps on process `pid`, in order: ("-i", "on"), ("-z",), …"""
    for step in steps:
        subprocess.run(["callgrind_control", *step, str(pid)], check=True, capture_output=True)


def instructions(out: Path) -> int:
    """The instructions one output file counted (its `totals:` line; `summary:` may say 0)."""
    counts = [int(line.split()[1]) for line in out.read_text().splitlines()
              if line.startswith(("totals:", "summary:"))]  # fmt: skip
    if not counts:
        raise RuntimeError(f"no totals in {out}")
    return max(counts)
