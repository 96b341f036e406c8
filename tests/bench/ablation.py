"""What each part of a `tools/call get_many_executions` costs our server: the section 1 load
against our service with parts switched off, next to the bare ceiling, in interleaved
rounds (a diagnostic for the next engineer; not part of `make bench`).

    python -m tests.bench.ablation [--quick] [--rounds N] [--calls N] [--callgrind]
                                   [--profile quiet|shipped] [VARIANT ...]

A variant is `base` (the service as shipped), `bare` (the rows without MCP:
tests/bench/reference.py), `same` (the same-answer ceiling, our exact bytes:
tests/bench/same_answer.py, the ceiling of `make bench`) or a comma list of the switches
below, e.g. `noadmit,notext`. Each round starts every variant's server afresh and
measures a fixed number of calls (16 connections unless `--connections`; with
`--redis-delay-ms`, Redis behind a proxy that delays each direction, as one network hop
away) with the CPU account of section 1: the server's, PostgreSQL's and Redis's CPU a
call. Medians and minimums over the rounds are
printed: on this shared machine one run moves ±15 %, so compare only variants measured
side by side, and expect parts that cost < 0.05 ms a call to stay inside the noise.

With `--callgrind` each server runs under valgrind's callgrind, counting instructions only
while the measured calls run (`callgrind_control -i on/off`): instructions a call repeat
within about 0.5 % whatever else the machine does, where CPU time moves by ±15 % or more.
The server is ~50× slower there: use `--calls 400` or so. With `--syscalls` strace counts
the server's system calls during the measured calls (the time they cost is the system
CPU callgrind does not see); with `--perf`, perf samples where the server's CPU time goes
(C functions and the kernel, by time); with `--opcodes`, the Python opcodes a call each
source file ran (exact, but the server runs ~20× slower: `--calls 300`). Each round also
prints the server's user and system CPU.

The switches replace code of the service in the measured process only (`serve` below):

- noadmit   admission takes nothing (no Redis calls);
- overlap   the opt-in overlapped admission (ELOVA_ADMISSION_OVERLAP=true): the admission's
            Redis call runs while the method does;
- notext    the MCP text block holds one character instead of the result's JSON;
- nolog     no request-log middleware (request id, HTTP metrics, access line);
- nometrics every metric call is a no-op;
- nocursor  nextCursor is not sealed;
- noaudit   no audit line for a tools/call (service/mcp/audit_line.py);
- nodeadline  dispatch runs without the request deadline's outer bound (the tool's stays);
- nobadinput  no bad-input middleware (service/server/bad_input.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.bench.callgrind import control, instructions, under_callgrind

SWITCHES = (
    "noadmit",
    "overlap",
    "notext",
    "nolog",
    "nometrics",
    "nocursor",
    "noaudit",
    "nodeadline",
    "nobadinput",
)


def serve(switches: set[str]) -> int:
    """`elova-mcp serve` with `switches` applied (run in the measured process)."""
    if "noadmit" in switches:
        from service.limits.admission import Admission, Grant
        from service.limits.budget import Budget

        async def acquire(self: Any, request_id: str, caller: Any) -> Grant:
            # Released already: nothing to free, and the same headers every time.
            budget = Budget(self.limits.approval_per_minute, 1e9)
            return Grant(request_id, caller.account_id, caller.approval_id, False, budget, True)

        Admission.acquire = acquire  # type: ignore[method-assign]
        Admission.begin = lambda self, request_id, caller: None  # type: ignore[method-assign]
    if "overlap" in switches:
        os.environ["ELOVA_ADMISSION_OVERLAP"] = "true"
    if "notext" in switches:
        from service.mcp import protocol as p

        one_character = p.encode([p.TextContent(text="x")])
        # Everything as shipped but the text block (tools_call joins these pieces).
        p.text_pieces = lambda structured: (one_character,)
    if "nolog" in switches:
        from service import app as factory
        from service.server import access_log

        # No layer at all, as before the chain was listed in create_app: no sampler, no
        # X-Request-Id hook, and the chain's place for the access log left out.
        access_log.setup_access_log = lambda app: None  # type: ignore[assignment,return-value]
        built = factory.create_app

        def create_app(cfg: Any) -> Any:
            app = built(cfg)
            app.middlewares.remove(None)  # type: ignore[arg-type]
            return app

        factory.create_app = create_app
    if "nometrics" in switches:
        from service.observability.metrics.app_metrics import Metrics

        for name in ("observe_rpc", "observe_http", "request_started", "request_finished",
                     "db_call", "redis_call"):  # fmt: skip
            setattr(Metrics, name, lambda self, *args, **kwargs: None)
    if "nocursor" in switches:
        from service.tools.cursors import CursorCodec

        CursorCodec.issue = lambda self, *args, **kwargs: "x"  # type: ignore[method-assign]
    _switch_off_added_parts(switches)
    count_opcodes_on_signal()
    from service.__main__ import main

    return main(["serve"])


OPCODES_FILE = "ELOVA_ABLATION_OPCODES"


def count_opcodes_on_signal() -> None:
    """With ELOVA_ABLATION_OPCODES set: SIGUSR1 starts counting the Python opcodes each
    function runs (sys.settrace, exact however loaded the machine is), SIGUSR2 writes the
    counts to that file as JSON."""
    path = os.environ.get(OPCODES_FILE)
    if not path:
        return
    import collections
    import json

    counts: collections.Counter[str] = collections.Counter()

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        frame.f_trace_opcodes = True
        code = frame.f_code
        key = f"{code.co_filename}:{code.co_firstlineno}:{code.co_name}"

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "opcode":
                counts[key] += 1
            return local

        return local

    def start(*_: Any) -> None:
        counts.clear()
        sys.settrace(tracer)

    def stop(*_: Any) -> None:
        sys.settrace(None)
        Path(path).write_text(json.dumps(counts))

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)


def _opcodes_by_file(out: Path, calls: int) -> tuple[float, dict[str, float]]:
    import json

    by_file: dict[str, float] = {}
    counts: dict[str, int] = json.loads(out.read_text())
    for key, count in counts.items():
        name = key.rsplit(":", 2)[0]
        for cut in ("site-packages/", f"{Path(__file__).parents[2]}/", "python3.11/"):
            name = name.split(cut, 1)[-1]
        by_file[name] = by_file.get(name, 0.0) + count / calls
    return sum(counts.values()) / calls, by_file


def _counting(pid: int, callgrind: bool, opcodes: bool, on: bool) -> None:
    """Start (or stop) counting instructions (callgrind) and Python opcodes in `pid`."""
    if callgrind:
        control(pid, ("-i", "on" if on else "off"))
    if opcodes:
        os.kill(pid, signal.SIGUSR1 if on else signal.SIGUSR2)
        time.sleep(0.3 if on else 2.0)  # the tracer is on / the counts are written


def _print_opcodes(out: Path, calls: int) -> None:
    total, by_file = _opcodes_by_file(out, calls)
    top = sorted(by_file.items(), key=lambda item: -item[1])[:25]
    print(f"  {total:,.0f} Python opcodes a call; by file: "
          + ", ".join(f"{name} {n:,.0f}" for name, n in top),
          file=sys.stderr, flush=True)  # fmt: skip


def _switch_off_added_parts(switches: set[str]) -> None:
    """The switches of what issues 20-22 added to a tool call."""
    if "noaudit" in switches:
        from service.mcp import transport

        async def audited(request: Any, app: Any, incoming: Any, answer: Any) -> Any:
            return answer

        setattr(transport, "audited", audited)  # noqa: B010 (a name transport imported)
    if "nodeadline" in switches:
        from service.mcp import dispatch, transport

        setattr(transport, "dispatch", dispatch._dispatch)  # noqa: B010 (a name transport imported)
    if "nobadinput" in switches:
        from service.server import error_answers

        async def refused_input(request: Any) -> None:
            return None

        setattr(error_answers, "refused_input", refused_input)  # noqa: B010 (a name it imported)


def _thousands(count: float) -> str:
    return "–" if math.isnan(count) else f"{count / 1000:,.0f}k"


def _user_system(pid: int) -> tuple[float, float]:
    """The process's user and system CPU seconds so far (/proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _strace(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """strace counting the system calls of every thread of `pid` until interrupted."""
    tracer = subprocess.Popen(["strace", "-f", "-c", "-o", str(out), "-p", str(pid)],
                              stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(0.5)  # attached to every thread before the measured calls start
    return tracer


def _perf(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """perf sampling where the server's CPU time goes (its C functions and the kernel's,
    by time: callgrind's instruction counts miss stalls and system calls) until
    interrupted; read it with `perf report -i OUT --stdio --sort dso,sym`."""
    sampler = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "4000", "-o", str(out),
                                "-p", str(pid)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(0.5)
    return sampler


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)


def _syscalls(tracer: subprocess.Popen[bytes], out: Path, calls: int) -> str:
    """Stop `tracer` and summarise its count: system calls a call, the largest first."""
    _stop(tracer)
    counts = []
    for line in out.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
            counts.append((int(fields[3]), fields[-1]))
    counts.sort(reverse=True)
    total = sum(n for n, _ in counts)
    top = ", ".join(f"{name} {n / calls:.2f}" for n, name in counts[:6])
    return f"{total / calls:.1f} system calls a call ({top})"


def _variant(variant: str, dsn: str, our_port: int, access: Any) -> tuple[int, list[str], Any, str]:
    """The port, command, request and expected answer text of one variant's server."""
    from tests.bench import scenarios
    from tests.bench.servers import free_port, python

    ws = access.workspace_id
    if variant == "bare":
        port = free_port()
        command = python("-m", "tests.bench.reference", "bare", "--port", str(port),
                         "--dsn", dsn)  # fmt: skip
        return port, command, scenarios.bare_call(ws), '"executions":['
    # A token a round: they live five minutes.
    arguments = {"workspaceId": str(ws), "limit": scenarios.PAGE}
    request = scenarios.tool_call(access.token(), "get_many_executions", arguments)
    if variant == "same":
        port = free_port()
        approval = str(access.caller.approval_id)
        command = python("-m", "tests.bench.ablation", "--serve-same", "--port", str(port),
                         "--dsn", dsn, "--approval", approval)  # fmt: skip
        return port, command, request, '"isError":false'
    switches = "" if variant == "base" else variant
    command = python("-m", "tests.bench.ablation", "--serve", switches)
    return our_port, command, request, '"isError":false'


def measure(
    quick: bool,
    rounds: int,
    calls: int,
    variants: list[str],
    callgrind: bool = False,
    syscalls: bool = False,
    perf: bool = False,
    opcodes: bool = False,
    connections: int = 16,
    redis_delay_ms: float = 0.0,
    profile: str = "quiet",
) -> str:
    from tests.bench import scale
    from tests.bench.servers import CpuAccount, job, load, running, service_env
    from tests.support.services import new_redis_prefix

    settings = scale.QUICK if quick else scale.FULL
    data, cfg, access = asyncio.run(scale.prepare(settings))
    logs = Path(tempfile.mkdtemp(prefix="elova-ablation-"))
    results: dict[str, list[tuple[float, float, float, float, float]]] = {v: [] for v in variants}
    with _redis_url(redis_delay_ms, logs) as redis_url:
        env = service_env(
            data.dsn, cfg.port, redis_url, new_redis_prefix(), cfg.signing_key_pem, profile
        )
        if callgrind:  # ~50x slower there: a Redis reply must not outlast the client's timeout
            env["ELOVA_REDIS_TIMEOUT_MS"] = "10000"
        for number in range(rounds):
            for variant in variants:
                # One file a run, kept for callgrind_annotate (its path is printed).
                out = logs / f"callgrind.{variant}.{number + 1}.out"
                port, command, request, expect = _variant(variant, data.dsn, cfg.port, access)
                if callgrind:
                    command = under_callgrind(command, out)
                counted_ops = logs / f"opcodes.{variant}.{number + 1}.json"
                if opcodes:
                    env[OPCODES_FILE] = str(counted_ops)
                with running("ablation", command, port, env, logs) as server:
                    load(job(port, [request], concurrency=connections, warmup_seconds=1.0,
                             duration_seconds=1.0, expect=expect))  # fmt: skip
                    _counting(server.pid, callgrind, opcodes, on=True)
                    traced = logs / f"strace.{variant}.{number + 1}.out"
                    tracer = _strace(server.pid, traced) if syscalls else None
                    sampled = logs / f"perf.{variant}.{number + 1}.data"
                    sampler = _perf(server.pid, sampled) if perf else None
                    user, system = _user_system(server.pid)
                    with CpuAccount(server.pid) as cpu:
                        done = load(job(port, [request], concurrency=connections,
                                        warmup_seconds=0.0,
                                        duration_seconds=900.0 if callgrind else 120.0,
                                        max_requests=calls, expect=expect))  # fmt: skip
                    user_after, system_after = _user_system(server.pid)
                    _stop(sampler)
                    _counting(server.pid, callgrind, opcodes, on=False)
                    traced_text = (
                        "" if tracer is None else _syscalls(tracer, traced, done.completed)
                    )
                if done.errors:
                    raise RuntimeError(f"{variant}: {done.errors} errors: {done.first_error[:300]}")
                per_call = cpu.per_call_ms(done.completed)
                counted = instructions(out) / done.completed if callgrind else math.nan
                results[variant].append(
                    (per_call["server"], per_call["postgres"], done.rps, counted, done.p50_ms)
                )  # fmt: skip
                split = (
                    f"user {1000 * (user_after - user) / done.completed:.3f} ms, system "
                    f"{1000 * (system_after - system) / done.completed:.3f} ms"
                )
                print(f"round {number + 1} {variant}: server {per_call['server']:.3f} ms "
                      f"({split}), PostgreSQL {per_call['postgres']:.3f} ms, "
                      f"{done.rps:.0f} req/s, p50 {done.p50_ms:.2f} ms"
                      + (f", {counted / 1000:,.0f}k instructions a call ({out})"
                         if callgrind else "")
                      + (f"; {traced_text}" if traced_text else "")
                      + (f"; perf samples in {sampled}" if perf else ""),
                      file=sys.stderr, flush=True)  # fmt: skip
                if opcodes:
                    _print_opcodes(counted_ops, done.completed)
    lines = [
        f"{rounds} rounds of {calls} calls on {connections} connections, {profile} profile, "
        f"{data.executions:,} executions"
        + (f", Redis {redis_delay_ms} ms away each way" if redis_delay_ms else ""),
        "",
        "| variant | server CPU a call, median (min) ms | PostgreSQL ms | req/s | p50 ms "
        "| instructions a call (callgrind) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for variant, runs in results.items():
        own = [r[0] for r in runs]
        lines.append(
            f"| {variant} | {statistics.median(own):.3f} ({min(own):.3f}) "
            f"| {statistics.median(r[1] for r in runs):.3f} "
            f"| {statistics.median(r[2] for r in runs):.0f} "
            f"| {statistics.median(r[4] for r in runs):.2f} "
            f"| {_thousands(statistics.median(r[3] for r in runs))} |"
        )
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _redis_url(delay_ms: float, logs: Path) -> Iterator[str]:
    """The machine's Redis URL, or with `delay_ms` that of a delay proxy in front of it
    (tests/bench/delay_proxy.py): Redis one (simulated) network hop away."""
    from urllib.parse import urlsplit

    from tests.bench.servers import free_port, python, running
    from tests.support.services import REDIS_URL

    if not delay_ms:
        yield REDIS_URL
        return
    target = urlsplit(REDIS_URL)
    port = free_port()
    command = python("-m", "tests.bench.delay_proxy", "--port", str(port),
                     "--target", f"{target.hostname}:{target.port or 6379}",
                     "--delay-ms", str(delay_ms))  # fmt: skip
    with running("delay-proxy", command, port, dict(os.environ), logs):
        yield target._replace(netloc=f"127.0.0.1:{port}").geturl()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve-same"]:  # the ceiling, counted as our server is
        count_opcodes_on_signal()
        from tests.bench import same_answer

        sys.argv = ["same_answer", *argv[1:]]
        return same_answer.main()
    parser = argparse.ArgumentParser(prog="python -m tests.bench.ablation")
    parser.add_argument("--quick", action="store_true", help="the 200k-execution data set")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--connections", type=int, default=16, help="concurrent connections")
    parser.add_argument(
        "--redis-delay-ms", type=float, default=0.0, help="Redis behind a delay proxy (each way)"
    )
    parser.add_argument("--callgrind", action="store_true", help="count instructions too")
    parser.add_argument(
        "--profile", choices=("quiet", "shipped"), default="quiet",
        help="our server's settings (tests/bench/servers.py)",
    )  # fmt: skip
    parser.add_argument(
        "--syscalls", action="store_true", help="count system calls too (strace -c)"
    )
    parser.add_argument("--perf", action="store_true", help="sample CPU time too (perf record)")
    parser.add_argument(
        "--opcodes", action="store_true", help="count Python opcodes a call by file (slow)"
    )
    parser.add_argument("--serve", metavar="SWITCHES", help=argparse.SUPPRESS)
    parser.add_argument("variants", nargs="*", default=["base", "bare"])
    args = parser.parse_args(argv)
    if args.serve is not None:
        return serve(set(filter(None, args.serve.split(","))))
    for variant in args.variants:
        unknown = set(variant.split(",")) - {*SWITCHES, "base", "bare", "same"}
        if unknown:
            parser.error(f"unknown switch {sorted(unknown)}; known: {', '.join(SWITCHES)}")
    sys.stdout.write(
        measure(
            args.quick,
            args.rounds,
            args.calls,
            args.variants,
            callgrind=args.callgrind,
            syscalls=args.syscalls,
            perf=args.perf,
            opcodes=args.opcodes,
            connections=args.connections,
            redis_delay_ms=args.redis_delay_ms,
            profile=args.profile,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
