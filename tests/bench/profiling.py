"""Where our service spends its time under the scale benchmark's throughput load (`--profile`):
py-spy samples when `py-spy` is on PATH (or in $PY_SPY), else cProfile; the hottest frames,
self and inclusive, and who sends when the hottest leaf is a socket write.
"""

from __future__ import annotations

import io
import os
import pstats
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from tests.bench import scenarios
from tests.bench.loadgen import Request, Result
from tests.bench.servers import python, running

# The section 1 load against a port (tests/bench/scale.py).
Throughput = Callable[[int, list[Request]], Result]


def profile(
    seconds: float,
    env: dict[str, str],
    logs: Path,
    port: int,
    access: scenarios.Access,
    throughput: Throughput,
) -> str:
    """Where our service spends its time under the throughput load: py-spy samples when
    `py-spy` is on PATH (or in $PY_SPY), else cProfile (whose counts of coroutine calls are
    resumptions, and whose overhead slows the run)."""
    requests = [
        scenarios.tool_call(access.token(), "get_many_executions",
                            {"workspaceId": str(access.workspace_id), "limit": scenarios.PAGE})
    ]  # fmt: skip
    spy = os.environ.get("PY_SPY") or shutil.which("py-spy")
    if spy:
        return _py_spy(spy, int(seconds), env, logs, port, requests, throughput)
    out = logs / "elova.prof"
    command = python("-m", "cProfile", "-o", str(out), "-m", "service", "serve")
    with running("elova-profiled", command, port, env, logs):
        result = throughput(port, requests)
    stream = io.StringIO()
    stats = pstats.Stats(str(out), stream=stream)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(35)
    body = "\n".join(line for line in stream.getvalue().splitlines() if line.strip())
    return f"cProfile; {_note(result)}\n\n```\n{body}\n```"


def _note(result: Result) -> str:
    errors = f": {result.first_error[:200]}" if result.errors else ""
    return f"throughput while profiled: {result.rps:.0f} req/s, {result.errors} errors{errors}"


def _py_spy(
    spy: str, seconds: int, env: dict[str, str], logs: Path, port: int,
    requests: list[Request], throughput: Throughput,
) -> str:  # fmt: skip
    raw = logs / "py-spy.txt"
    with running("elova-sampled", python("-m", "service", "serve"), port, env, logs) as server:
        recorder = subprocess.Popen(
            [spy, "record", "--pid", str(server.pid), "--format", "raw", "--rate", "250",
             "--duration", str(seconds + 2), "--output", str(raw), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        result = throughput(port, requests)
        recorder.wait(timeout=seconds + 60)
    if not raw.exists():
        return f"py-spy produced no samples (exit {recorder.returncode}); {_note(result)}"
    return f"py-spy, 250 samples/s; {_note(result)}\n\n" + summarize_stacks(raw.read_text())


def summarize_stacks(collapsed: str, top: int = 30) -> str:
    """Self and inclusive shares of the hottest frames from py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    writers: Counter[str] = Counter()  # who sends, when the hottest leaf is a socket write
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";")[1:] if f]  # first: the thread
        total += count
        if frames:
            own[_short(frames[-1])] += count
            if _short(frames[-1]).startswith("_SelectorSocketTransport.write "):
                writers[_caller(frames)] += count
        for frame in {_short(f) for f in frames}:
            inclusive[frame] += count
    if not total:
        return "no samples"
    lines = ["| own % | frame |", "| ---: | --- |"]
    lines += [f"| {100 * n / total:.1f} | `{f}` |" for f, n in own.most_common(top)]
    lines += ["", "| inclusive % | frame (service code and its libraries) |", "| ---: | --- |"]
    picked = [(f, n) for f, n in inclusive.most_common() if "run_once" not in f][:top]
    lines += [f"| {100 * n / total:.1f} | `{f}` |" for f, n in picked]
    lines += ["", "| % of samples | socket writes, by the code that sends |", "| ---: | --- |"]
    lines += [f"| {100 * n / total:.1f} | `{f}` |" for f, n in writers.most_common(12)]
    return "\n".join(lines)


def _caller(frames: list[str]) -> str:
    """The nearest frame above a socket write that is not asyncio's own."""
    for frame in reversed(frames[:-1]):
        if "asyncio/" not in frame:
            return _short(frame)
    return "asyncio"


def _short(frame: str) -> str:
    """`func (/long/path/site-packages/pkg/mod.py:12)` → `func (pkg/mod.py)`."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/work/main/", "python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{name} ({path})"
