"""The same-answer comparison: `tools/call get_many_executions` (first page, 50 rows) against
our service, the servers users pick instead (the official Python SDK reference, a
TypeScript SDK server and a FastMCP server: tests/bench/peers/) and the same-answer ceiling
(tests/bench/same_answer.py), in rounds that alternate the servers under the same load
(N connections, a separate load-generator process, the order reversed every other round),
with the ratios ours ÷ each (issue 23: ≥ 3× the Python SDK, ≥ 2× the TypeScript SDK,
≥ 3× FastMCP, with less server CPU a call than each; ≥ 0.90 of the ceiling).

Before the rounds, one request is sent to every server and each answer is compared with
ours: the ceiling's byte for byte (tests.bench.same_answer.compare), each peer's rows
(tests.bench.peers.check: the same execution ids in the same order, else the bench stops;
the report says whether the rows are ours byte for byte). A peer not installed here
(tests/bench/peers/install.sh, which `make bench` runs) is left out and the report says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

from service.tools.cursors import CursorCodec, derive_cursor_key
from tests.bench import peers, scenarios
from tests.bench.loadgen import Request, Result
from tests.bench.same_answer import PERIOD, TOOL, compare, post
from tests.bench.scale import Row, Settings, accounted, median_row, prepare, throughput_table
from tests.bench.servers import free_port, python, running, service_env
from tests.support.services import REDIS_URL, new_redis_prefix

SDK_TARGET = 3.0
CEILING_TARGET = 0.90
OURS = "elova-mcp (MCP + OAuth bearer + Redis admission)"
SDK = "official Python SDK (MCPServer, stateless JSON)"
CEILING = "same-answer ceiling (bare aiohttp: our statement, our bytes)"
EXPECT = '"isError":false'
MAX_SECONDS = 10.0  # a run (15 of them in a full bench): ratios need no longer

# A peer's success answer: the TypeScript SDK leaves isError out when false.
PEER_EXPECT = '"structuredContent":{'


@dataclasses.dataclass(frozen=True)
class Command:
    argv: list[str]
    port: int
    request: Callable[[], Request]
    expect: str = EXPECT


def _loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _commands(
    ours: Command, dsn: str, ws: UUID, approval_id: UUID
) -> tuple[dict[str, Command], dict[str, float]]:
    """Every server of the comparison in the table's order, and the req/s target of each
    (ours ÷ it) besides the ceiling's."""
    sdk_port, ceiling_port = free_port(), free_port()
    commands: dict[str, Command] = {
        OURS: ours,
        SDK: Command(
            python("-m", "tests.bench.reference", "sdk", "--port", str(sdk_port), "--dsn", dsn),
            sdk_port,
            lambda: scenarios.sdk_call(ws),
        ),
    }
    targets = {SDK: SDK_TARGET}
    absent = peers.missing()
    for peer in peers.PEERS:
        if peer in absent:
            continue
        port = free_port()
        commands[peer.label] = Command(
            peer.command(port, dsn), port, lambda: scenarios.sdk_call(ws), PEER_EXPECT
        )
        targets[peer.label] = peer.target
    commands[CEILING] = Command(
        python("-m", "tests.bench.same_answer", "--port", str(ceiling_port), "--dsn", dsn,
               "--approval", str(approval_id)),
        ceiling_port,
        ours.request,  # the same request bytes as ours
    )  # fmt: skip
    return commands, targets


def _target_table(rows: list[Row], runs: dict[str, list[Result]], targets: dict[str, float]) -> str:
    """Ours ÷ each server: req/s of the medians, the median of the per-round ratios, the
    target, server CPU a call beside ours (less than each peer's is a target too), and the
    same-answer ceiling ÷ each peer: the most a cut of our own work can reach, since the
    ceiling is the least work that gives our answer (a target above it asks for a cheaper
    statement, shaping or encoding, which the ceiling shares)."""
    ours = rows[0]
    ceiling = next((row for row in rows if row.name == CEILING), None)
    lines = [
        "| ours ÷ | req/s (medians) | median of the rounds (by round) | target | met "
        "| server CPU a call, ours / this ms | less CPU | ceiling ÷ this |",
        "| --- | ---: | ---: | ---: | :-: | ---: | :-: | ---: |",
    ]
    for row in rows[1:]:
        ratio = ours.result.rps / row.result.rps if row.result.rps else float("nan")
        pairs = zip(runs[OURS], runs[row.name], strict=True)
        per_round = [o.rps / t.rps if t.rps else float("nan") for o, t in pairs]
        ours_cpu = (ours.cpu_ms or {}).get("server", 0.0)
        their_cpu = (row.cpu_ms or {}).get("server", 0.0)
        if row.name == CEILING:
            target, unit, cpu_met = CEILING_TARGET, "", "—"
        else:
            target, unit = targets[row.name], "×"
            cpu_met = "yes" if ours_cpu < their_cpu else "**no**"
        met = "yes" if ratio >= target else "**no**"
        bound = "—"
        if ceiling is not None and row is not ceiling and row.result.rps:
            bound = f"{ceiling.result.rps / row.result.rps:.2f}×"
        lines.append(
            f"| {row.name.split(' (')[0]} | **{ratio:.2f}{unit}** "
            f"| {statistics.median(per_round):.2f}{unit} ("
            + ", ".join(f"{r:.2f}" for r in per_round)
            + f") | ≥ {target:.2f}{unit} | {met} "
            f"| {ours_cpu:.2f} / {their_cpu:.2f} | {cpu_met} | {bound} |"
        )
    return "\n".join(lines)


async def run(settings: Settings) -> str:
    settings = dataclasses.replace(settings, duration=min(settings.duration, MAX_SECONDS))
    load_before = _loadavg()
    data, cfg, access = await prepare(settings)
    logs = Path(tempfile.mkdtemp(prefix="elova-ceiling-"))
    ws = access.workspace_id
    port = cfg.port
    env = service_env(data.dsn, port, REDIS_URL, new_redis_prefix(), cfg.signing_key_pem)
    env[peers.STATEMENT_VARIABLE] = peers.statement()
    arguments = {"workspaceId": str(ws), "limit": scenarios.PAGE}

    def ours_request() -> Request:  # a fresh token a run: they live 5 minutes
        return scenarios.tool_call(access.token(), TOOL, arguments)

    ours = Command(python("-m", "service", "serve"), port, ours_request)
    commands, targets = _commands(ours, data.dsn, ws, access.caller.approval_id)
    _say("same answer: comparing each server's answer with ours …")
    codec = CursorCodec(derive_cursor_key(cfg.signing_key_pem))
    binding = codec.binding(
        TOOL, access.caller, [str(ws), None, None, None, PERIOD, None], scenarios.PAGE
    )
    verdicts: dict[str, str] = {}
    with running("elova", ours.argv, port, env, logs):
        ours_body = post(port, ours_request())
        for label, their in list(commands.items())[1:]:
            with running("same-answer", their.argv, their.port, env, logs):
                theirs = post(their.port, their.request())
            short = label.split(" (")[0]
            verdicts[label] = (
                compare(ours_body, theirs, codec, binding)
                if label == CEILING
                else peers.check(short, ours_body, theirs)
            )
            _say(f"  {short}: {verdicts[label]}")
    runs: dict[str, list[tuple[Result, dict[str, float]]]] = {label: [] for label in commands}
    order = list(commands)
    for number in range(settings.rounds):
        for label in order if number % 2 == 0 else order[::-1]:
            their = commands[label]
            _say(f"{label.split(' (')[0]}: throughput run, round {number + 1} …")
            with running("bench", their.argv, their.port, env, logs) as server:
                requests = [their.request()]
                runs[label].append(
                    accounted(server.pid, their.port, requests, settings, their.expect)
                )
    shutil.rmtree(logs, ignore_errors=True)
    rows = [median_row(label, results) for label, results in runs.items()]
    results = {label: [r for r, _ in pairs] for label, pairs in runs.items()}
    absent = peers.missing()
    lines = [
        f"## Ours, the servers users pick and the same-answer ceiling: `tools/call {TOOL}` "
        f"(first page, {scenarios.PAGE} rows), {settings.concurrency} connections, "
        f"{settings.duration:.0f} s a run, {settings.rounds} round(s) alternating the servers",
        "",
        f"- 1-minute load average {load_before} at the start, {_loadavg()} at the end "
        f"({os.cpu_count()} CPUs shared with the load generator, PostgreSQL and Redis).",
        "- Same answer, one request to each beside ours: "
        + "; ".join(f"{label.split(' (')[0]}: {text}" for label, text in verdicts.items())
        + ".",
    ]
    if absent:
        lines.append(
            "- Left out, not installed here ("
            + peers.INSTALL
            + "): "
            + ", ".join(p.short for p in absent)
            + "."
        )
    lines += [
        f"- {row.name.split(' (')[0]}: {row.result.errors} errors, the first: "
        f"`{row.result.first_error[:300]}`"
        for row in rows
        if row.result.errors
    ]
    lines += ["", throughput_table(rows), "", _target_table(rows, results, targets)]
    return "\n".join(lines) + "\n"


def main(settings: Settings) -> str:
    return asyncio.run(run(settings))
