"""Running the Node tools (local Node 22) from async tests without blocking the event loop:
the test proxy serves in this loop while the child process talks to it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

TS_DIR = Path(__file__).resolve().parent / "ts"
BIN = TS_DIR / "node_modules" / ".bin"


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


async def run(
    args: list[str],
    env: dict[str, str],
    *,
    stdin: bytes | None = None,
    timeout: float = 60,
    cwd: Path = TS_DIR,
) -> Completed:
    proc = await asyncio.create_subprocess_exec(
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError(
            f"{' '.join(args[:3])} … timed out after {timeout} s\n{err.decode(errors='replace')}"
        ) from None
    assert proc.returncode is not None
    return Completed(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))
