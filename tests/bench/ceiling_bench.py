"""The same-answer comparison: `tools/call get_many_executions` (first page, 50 rows) against
our service, the official-SDK reference and the same-answer ceiling (tests/bench/same_answer.py),
in rounds that alternate the three servers under the same load (N connections, a separate
load-generator process), with the ratios ours ÷ SDK (target ≥ 3×) and ours ÷ ceiling
(target ≥ 0.70).

Before the rounds, one request is sent to our service and to the ceiling, and the two
answers are compared (tests.bench.same_answer.compare): the report says whether they match.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from service.tools.cursors import CursorCodec, derive_cursor_key
from tests.bench import scenarios
from tests.bench.loadgen import Request, Result
from tests.bench.same_answer import PERIOD, TOOL, compare, post
from tests.bench.scale import Settings, accounted, median_row, prepare, throughput_table
from tests.bench.servers import free_port, python, running, service_env
from tests.support.services import REDIS_URL, new_redis_prefix

SDK_TARGET = 3.0
CEILING_TARGET = 0.70
OURS = "elova-mcp (MCP + OAuth bearer + Redis admission)"
SDK = "official Python SDK (MCPServer, stateless JSON)"
CEILING = "same-answer ceiling (bare aiohttp: our statement, our bytes)"
EXPECT = '"isError":false'
MAX_SECONDS = 10.0  # a run (9 of them in a full bench): ratios need no longer


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def run(settings: Settings) -> str:
    settings = dataclasses.replace(settings, duration=min(settings.duration, MAX_SECONDS))
    data, cfg, access = await prepare(settings)
    logs = Path(tempfile.mkdtemp(prefix="elova-ceiling-"))
    ws = access.workspace_id
    port = cfg.port
    env = service_env(data.dsn, port, REDIS_URL, new_redis_prefix(), cfg.signing_key_pem)
    arguments = {"workspaceId": str(ws), "limit": scenarios.PAGE}

    def ours_request() -> Request:  # a fresh token a run: they live 5 minutes
        return scenarios.tool_call(access.token(), TOOL, arguments)

    ceiling_port, sdk_port = free_port(), free_port()
    commands: dict[str, tuple[list[str], int, Callable[[], Request]]] = {
        OURS: (python("-m", "service", "serve"), port, ours_request),
        SDK: (
            python("-m", "tests.bench.reference", "sdk", "--port", str(sdk_port),
                   "--dsn", data.dsn),
            sdk_port,
            lambda: scenarios.sdk_call(ws),
        ),
        CEILING: (
            python("-m", "tests.bench.same_answer", "--port", str(ceiling_port), "--dsn",
                   data.dsn, "--approval", str(access.caller.approval_id)),
            ceiling_port,
            ours_request,  # the same request bytes as ours
        ),
    }  # fmt: skip
    _say("same-answer ceiling: comparing its answer with ours …")
    codec = CursorCodec(derive_cursor_key(cfg.signing_key_pem))
    binding = codec.binding(
        TOOL, access.caller, [str(ws), None, None, None, PERIOD, None], scenarios.PAGE
    )
    ours_command, _, _ = commands[OURS]
    ceiling_command, _, _ = commands[CEILING]
    with (
        running("elova", ours_command, port, env, logs),
        running("same-answer", ceiling_command, ceiling_port, env, logs),
    ):
        request = ours_request()
        verdict = compare(post(port, request), post(ceiling_port, request), codec, binding)
    _say(f"  {verdict}")
    runs: dict[str, list[tuple[Result, dict[str, float]]]] = {label: [] for label in commands}
    order = list(commands)
    for number in range(settings.rounds):
        for label in order if number % 2 == 0 else order[::-1]:
            command, server_port, make_request = commands[label]
            _say(f"{label.split(' (')[0]}: throughput run, round {number + 1} …")
            with running("bench", command, server_port, env, logs) as server:
                result = accounted(server.pid, server_port, [make_request()], settings, EXPECT)
                runs[label].append(result)
    shutil.rmtree(logs, ignore_errors=True)
    rows = [median_row(label, results) for label, results in runs.items()]
    ours_rps, sdk_rps, ceiling_rps = (row.result.rps for row in rows)
    per_round = [
        (o[0].rps / s[0].rps, o[0].rps / c[0].rps)
        for o, s, c in zip(runs[OURS], runs[SDK], runs[CEILING], strict=True)
    ]
    to_sdk, to_ceiling = ours_rps / sdk_rps, ours_rps / ceiling_rps
    spread = ""
    if len(per_round) > 1:
        spread = (
            f" (median of the per-round ratios: "
            f"{statistics.median(s for s, _ in per_round):.2f}× / "
            f"{statistics.median(c for _, c in per_round):.2f})"
        )
    lines = [
        f"## Ours, the SDK and the same-answer ceiling: `tools/call {TOOL}` (first page, "
        f"{scenarios.PAGE} rows), {settings.concurrency} connections, {settings.duration:.0f} s "
        f"a run, {settings.rounds} round(s) alternating the servers",
        "",
        f"- Same answer: our service and the ceiling answered one request with {verdict}.",
        "",
        throughput_table(rows),
        "",
        f"- ours ÷ SDK = **{to_sdk:.2f}×** (target ≥ {SDK_TARGET:.0f}×: "
        f"{'met' if to_sdk >= SDK_TARGET else '**not met**'}); ours ÷ same-answer ceiling = "
        f"**{to_ceiling:.2f}** (target ≥ {CEILING_TARGET:.2f}: "
        f"{'met' if to_ceiling >= CEILING_TARGET else '**not met**'}){spread}; per round: "
        + ", ".join(f"{s:.2f}× / {c:.2f}" for s, c in per_round)
        + ".",
    ]
    return "\n".join(lines) + "\n"


def main(settings: Settings) -> str:
    return asyncio.run(run(settings))
