"""Old against new: `python -m tests.bench --baseline COMMIT` (e.g. `--baseline cf8c545`).

The given commit is checked out into a temporary git worktree (`git worktree add --detach`);
its server runs from that checkout (`python -m service serve` with the checkout first on
PYTHONPATH, under this venv, on the current data set and database) next to the current
one: rounds alternate the two under the same `tools/call get_many_executions` load (first
page, 50 rows, N connections), and the report gives both throughputs and new ÷ old. The
worktree is removed afterwards, also when the run fails.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.bench import scenarios
from tests.bench.loadgen import Result
from tests.bench.scale import Settings, accounted, median_row, prepare
from tests.bench.servers import ROOT, python, running, service_env
from tests.support.services import REDIS_URL, new_redis_prefix

TOOL = "get_many_executions"
EXPECT = '"isError":false'


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


@contextmanager
def checkout(commit: str) -> Iterator[Path]:
    """A detached worktree of `commit` in a temporary directory, removed on exit."""
    path = Path(tempfile.mkdtemp(prefix="elova-baseline-"))
    path.rmdir()  # git creates it
    _git("worktree", "add", "--detach", str(path), commit)
    try:
        yield path
    finally:
        _git("worktree", "remove", "--force", str(path))
        shutil.rmtree(path, ignore_errors=True)


def _imported_from(env: dict[str, str], cwd: Path) -> str:
    """Where `import service` resolves under this environment (the check that the baseline
    runs its own code, not the editable install of the current tree)."""
    done = subprocess.run(
        python("-c", "import service; print(service.__file__)"),
        cwd=cwd, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def run(settings: Settings, commit: str) -> str:
    data, cfg, access = await prepare(settings)
    logs = Path(tempfile.mkdtemp(prefix="elova-baseline-logs-"))
    port = cfg.port
    env = service_env(data.dsn, port, REDIS_URL, new_redis_prefix(), cfg.signing_key_pem)
    arguments = {"workspaceId": str(access.workspace_id), "limit": scenarios.PAGE}
    new_name = f"new ({_git('rev-parse', '--short', 'HEAD')}"
    new_name += (
        ", with uncommitted changes)"
        if _git("status", "--porcelain", "--untracked-files=no")
        else ")"
    )
    old_name = f"old ({_git('rev-parse', '--short', commit)})"
    runs: dict[str, list[tuple[Result, dict[str, float]]]] = {new_name: [], old_name: []}
    with checkout(commit) as tree:
        old_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), env.get(
            "PYTHONPATH")]))}  # fmt: skip
        where = {new_name: ROOT, old_name: tree}
        environments = {new_name: env, old_name: old_env}
        imported = _imported_from(old_env, tree)
        if not imported.startswith(str(tree)):
            raise SystemExit(f"the baseline would run {imported}, not its checkout {tree}")
        order = [new_name, old_name]
        for number in range(settings.rounds):
            for name in order if number % 2 == 0 else order[::-1]:
                _say(f"{name}: throughput run, round {number + 1} …")
                request = scenarios.tool_call(access.token(), TOOL, arguments)
                with running(
                    "baseline", python("-m", "service", "serve"), port, environments[name],
                    logs, cwd=where[name],
                ) as server:  # fmt: skip
                    runs[name].append(accounted(server.pid, port, [request], settings, EXPECT))
    shutil.rmtree(logs, ignore_errors=True)
    rows = {name: median_row(name, results) for name, results in runs.items()}
    per_round = [n[0].rps / o[0].rps for n, o in zip(*runs.values(), strict=True)]
    new_rps, old_rps = rows[new_name].result.rps, rows[old_name].result.rps
    lines = [
        f"## Old against new: `tools/call {TOOL}` (first page, {scenarios.PAGE} rows), "
        f"{settings.concurrency} connections, {settings.duration:.0f} s a run, "
        f"{settings.rounds} round(s) alternating",
        "",
        "| server | req/s | p50 ms | p99 ms | errors "
        "| CPU a call: server / PostgreSQL / Redis, ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in rows.items():
        r, cpu = row.result, row.cpu_ms or {}
        cpu_text = " / ".join(f"{cpu.get(g, 0.0):.2f}" for g in ("server", "postgres", "redis"))
        rounds = row.rounds or []
        spread = f" ({min(rounds):.0f}–{max(rounds):.0f})" if len(rounds) > 1 else ""
        rps = f"{r.rps:.0f}{spread}"
        lines.append(
            f"| {name} | {rps} | {r.p50_ms:.1f} | {r.p99_ms:.1f} | {r.errors} | {cpu_text} |"
        )
    lines += [
        "",
        f"- new ÷ old = **{new_rps / old_rps:.2f}×** (medians); per round: "
        + ", ".join(f"{ratio:.2f}×" for ratio in per_round)
        + (f" (median {statistics.median(per_round):.2f}×)" if len(per_round) > 1 else "")
        + ". The old server ran from a worktree of its commit with this venv, on this data set.",
    ]
    return "\n".join(lines) + "\n"


def main(settings: Settings, commit: str) -> str:
    return asyncio.run(run(settings, commit))
