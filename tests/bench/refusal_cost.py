"""What each refusal costs our server beside aiohttp's floor, without sockets or load
generator (issue 23, "Refusals near the floor"; a diagnostic, not part of `make bench`).

    python -m tests.bench.refusal_cost [--rounds N] [--requests N] [--baseline COMMIT]
                                       [--profile KIND] [--callgrind KIND]

Each server's aiohttp app (ours as `elova-mcp serve` builds it, pacing off with
ELOVA_PACE_REFUSALS_AFTER=0, limits raised as in the flood bench; the floor is
`tests.bench.reference refusal`, a precomputed 401) is fed the same request bytes through an
in-process transport on one keep-alive connection, one request at a time, in a process of
its own (uvloop, the collector tuned as in `serve`). A measurement is the process CPU
(time.process_time) of `--requests` refusals in a row, after a warm-up of as many; the
table gives the best of `--rounds` measurements (the floor's from the same processes), in
µs a refusal and ÷ the floor. With `--baseline COMMIT` every round also measures a detached
worktree of that commit (this module copied into it), old and new alternating. The kinds
are those of tests/bench/floods.py:

    rate        an approval whose rate budget is spent in Redis (429)
    expired     an access token whose exp lies an hour in the past (401)
    signature   a valid token with the first signature characters altered (401)
    garbage     a bearer of random token characters (401)
    notoken     no Authorization header (401)
    oversized   a body over ELOVA_MAX_BODY_BYTES (413)

Every answer's status is checked. What the process does not spend is not counted: Redis's
CPU for the 429's round trip, the kernel's for socket I/O (the floor pays neither either).

`--profile KIND` prints the cProfile of our server refusing KIND (cumulative, top 60);
`--callgrind KIND` runs the measurement of KIND (ours and the floor) under valgrind's
callgrind and prints instructions a refusal, which repeat within ~1 % whatever the load of
the machine (the process runs ~50× slower there: `--requests 200` or so).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import os
import pstats
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from tests.bench.callgrind import control, instructions, under_callgrind
from tests.bench.loadgen import Request

KINDS = ("rate", "expired", "signature", "garbage", "notoken", "oversized")
STATUS = {"rate": 429, "oversized": 413}  # the others: 401
FLOOR = "floor"


class Plan(msgspec.Struct):
    """What a measuring process is told: the service's environment, the raw requests."""

    env: dict[str, str]
    requests: dict[str, bytes]
    count: int
    connections: int
    floor: bool
    kinds: list[str]
    profile: bool = False
    callgrind: bool = False


# The measuring process.


class _Transport(asyncio.Transport):
    """Collects what the server writes; wakes the reader when one whole answer is in."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer = bytearray()
        self.done: asyncio.Event = asyncio.Event()
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.buffer += data
        head_end = self.buffer.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = bytes(self.buffer[:head_end]).lower()
        at = head.find(b"\r\ncontent-length:")
        length = int(head[at + 17 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
        if len(self.buffer) >= head_end + 4 + length:
            self.done.set()

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in ("peername", "sockname"):
            return ("127.0.0.1", 40000)
        return default

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        return None

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None


class _Client:
    """One keep-alive connection to a protocol; `ask` sends a request, returns the status."""

    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol
        self.transport = _Transport()
        protocol.connection_made(self.transport)

    async def ask(self, raw: bytes) -> int:
        transport = self.transport
        transport.done.clear()
        transport.buffer.clear()
        self.protocol.data_received(raw)
        await transport.done.wait()
        return int(transport.buffer[9:12])


async def _asking(client: _Client, raw: bytes, status: int, count: int) -> None:
    for _ in range(count):
        got = await client.ask(raw)
        if got != status:
            raise RuntimeError(f"expected {status}, got {got}: {bytes(client.transport.buffer)!r}")


def _each(count: int, connections: int) -> int:
    """The requests each client makes in one half of a `_rounds` (warm-up, measured)."""
    return max(1, count // connections)


def _made(count: int, connections: int) -> int:
    """The requests one `_rounds` makes: its warm-up and the measured ones."""
    return 2 * _each(count, connections) * connections


async def _rounds(clients: list[_Client], raw: bytes, status: int, count: int) -> float:
    """Seconds of process CPU a request, over `count` requests (spread over the clients,
    all at once) after as many to warm up."""
    each = _each(count, len(clients))
    await asyncio.gather(*(_asking(client, raw, status, each) for client in clients))
    started = time.process_time()
    await asyncio.gather(*(_asking(client, raw, status, each) for client in clients))
    return (time.process_time() - started) / (each * len(clients))


def _print_profile(profile: cProfile.Profile) -> None:
    """The top 60 functions (cumulative), then the process's own time by file."""
    stats = pstats.Stats(profile, stream=sys.stderr)
    stats.sort_stats("cumulative").print_stats(60)
    by_file: dict[str, float] = {}
    for (path, _, _), row in stats.stats.items():  # type: ignore[attr-defined]
        by_file[path] = by_file.get(path, 0.0) + row[2]
    total = sum(by_file.values())
    for path, seconds in sorted(by_file.items(), key=lambda item: -item[1])[:40]:
        print(f"{100 * seconds / total:5.1f} %  {path}", file=sys.stderr)


def _callgrind(on: bool) -> None:
    """Count from here (zeroed), or stop counting and dump what was counted as a part."""
    control(os.getpid(), *((("-z",), ("-i", "on")) if on else (("-i", "off"), ("-d",))))


async def _measure(plan: Plan) -> dict[str, float]:
    from aiohttp import web

    from service.app import create_app
    from service.app_keys import METRICS
    from service.config import Config
    from service.server.connections import Connection, ConnectionGate
    from tests.bench.reference import refusal_app

    results: dict[str, float] = {}
    cfg = Config.from_env(plan.env)
    ours = web.AppRunner(create_app(cfg), access_log=None, handle_signals=False)
    await ours.setup()
    floor = web.AppRunner(refusal_app(), access_log=None, handle_signals=False)
    await floor.setup()
    try:
        assert ours.server is not None and floor.server is not None
        gate = ConnectionGate(cfg.connections, ours.app.get(METRICS), cfg.trusted_proxies)
        loop = asyncio.get_running_loop()
        settings = cfg.connections
        ours_client = [
            _Client(
                Connection(
                    ours.server,
                    gate,
                    loop=loop,
                    access_log=None,
                    keepalive_timeout=settings.keepalive_timeout_seconds,
                    lingering_time=settings.body_timeout_seconds,
                )
            )
            for _ in range(plan.connections)
        ]
        floor_client = [_Client(floor.server()) for _ in range(plan.connections)]
        gc.freeze()
        for kind in plan.kinds:
            status = STATUS.get(kind, 401)
            raw = plan.requests[kind]
            if plan.callgrind:
                await _rounds(ours_client, raw, status, plan.count)  # warm, uncounted
                _callgrind(True)
            profile = cProfile.Profile() if plan.profile else None
            if profile is not None:
                profile.enable()
            results[kind] = await _rounds(ours_client, raw, status, plan.count)
            if profile is not None:
                profile.disable()
                _print_profile(profile)
            if plan.callgrind:
                _callgrind(False)
        if plan.floor:
            if plan.callgrind:
                await _rounds(floor_client, plan.requests["expired"], 401, plan.count)
                _callgrind(True)
            results[FLOOR] = await _rounds(floor_client, plan.requests["expired"], 401, plan.count)
            if plan.callgrind:
                _callgrind(False)
    finally:
        await floor.cleanup()
        await ours.cleanup()
    return results


def child() -> int:
    from service.cli.serve import event_loop_factory, tune_gc
    from service.observability.logs import configure_logging

    plan = msgspec.json.decode(sys.stdin.buffer.read(), type=Plan)
    out = sys.stdout
    # The service's stdout (its log and audit lines) goes where a bench server's goes: a file.
    with tempfile.TemporaryFile("w") as lines:
        sys.stdout = lines
        configure_logging(plan.env.get("ELOVA_LOG_LEVEL", "WARNING"))
        tune_gc()
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            results = runner.run(_measure(plan))
        sys.stdout = out
    out.buffer.write(msgspec.json.encode(results))
    out.flush()
    return 0


# The measuring run.


def _raw(request: Request) -> bytes:
    """The request's bytes on the wire, as the load generator sends them."""
    body: bytes = request.body.encode()
    head = [f"POST {request.path} HTTP/1.1", "Host: 127.0.0.1"]
    head += [f"{name}: {value}" for name, value in request.headers.items()]
    head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def _prepare() -> tuple[dict[str, str], dict[str, bytes]]:

    from service.auth.tokens import TokenService
    from tests.bench import scenarios
    from tests.bench.floods import (
        TOOL,
        UNPACED,
        _bad_signature,
        _oversized,
        _spend_budget,
        _without_auth,
        prepare_flood,
    )
    from tests.bench.scale import QUICK
    from tests.bench.servers import service_env
    from tests.support.services import REDIS_URL, new_redis_prefix

    data, cfg, access, flooder = await prepare_flood(QUICK)
    prefix = new_redis_prefix()
    env = service_env(data.dsn, cfg.port, REDIS_URL, prefix, cfg.signing_key_pem)
    env.update(UNPACED)
    _spend_budget(prefix, flooder.caller.approval_id)
    arguments = {"workspaceId": str(access.workspace_id), "limit": scenarios.PAGE}
    caller = access.caller
    expired, _ = TokenService(cfg).issue_access_token(
        account_id=caller.account_id,
        client_id=access.client_id,
        scopes=caller.scopes,
        approval_id=caller.approval_id,
        generation=caller.generation,
        now=time.time() - 3600,
    )

    def call(token: str) -> Request:
        return scenarios.tool_call(token, TOOL, arguments)

    requests = {
        "rate": call(flooder.token()),
        "expired": call(expired),
        "signature": call(_bad_signature(access.token())),
        "garbage": call(secrets.token_urlsafe(300)),
        "notoken": _without_auth(call(access.token())),
        "oversized": _oversized(call(access.token()), cfg.limits.max_body_bytes),
    }
    return env, {kind: _raw(request) for kind, request in requests.items()}


def _run_child(plan: Plan, tree: Path | None) -> dict[str, float]:
    env = dict(os.environ)
    cwd = Path(__file__).resolve().parents[2] if tree is None else tree
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    command = [sys.executable, "-m", "tests.bench.refusal_cost", "--child"]
    if plan.callgrind:
        out = f"{tempfile.gettempdir()}/refusal_cost.%p.out"
        command = under_callgrind(command, out)
    done = subprocess.run(
        command, cwd=cwd, env=env, input=msgspec.json.encode(plan), capture_output=True, check=False
    )
    if plan.profile:
        sys.stderr.write(done.stderr.decode())
    if done.returncode != 0:
        raise RuntimeError(f"measuring process failed: {done.stderr.decode()[-3000:]}")
    return msgspec.json.decode(done.stdout, type=dict[str, float])


def _callgrind_counts() -> list[int]:
    """Instructions of each dumped part (ours, then the floor), files removed once read
    (moved to the directory REFUSAL_COST_KEEP names, for callgrind_annotate, if set)."""
    keep = os.environ.get("REFUSAL_COST_KEEP")
    parts = []
    for path in sorted(Path(tempfile.gettempdir()).glob("refusal_cost.*.out.*")):
        parts.append(instructions(path))
        if keep is None:
            path.unlink()
        else:
            shutil.move(path, Path(keep) / path.name)
    for path in Path(tempfile.gettempdir()).glob("refusal_cost.*.out"):
        path.unlink()  # the part after the last dump: start-up and shutdown
    return parts


def _table(best: dict[str, dict[str, float]], labels: list[str]) -> str:
    head = "| refusal | " + " | ".join(f"{label}: µs (÷ floor)" for label in labels) + " |"
    lines = [head, "| --- |" + " ---: |" * len(labels)]
    floor = best[labels[-1]][FLOOR]
    for kind in KINDS:
        cells = [
            f"{best[label][kind] * 1e6:.0f} ({best[label][kind] / floor:.1f}×)" for label in labels
        ]
        lines.append(f"| {kind} ({STATUS.get(kind, 401)}) | " + " | ".join(cells) + " |")
    lines.append(f"\nThe floor (tests.bench.reference refusal): {floor * 1e6:.0f} µs a refusal.")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.refusal_cost")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--baseline", metavar="COMMIT")
    parser.add_argument("--profile", choices=KINDS)
    parser.add_argument("--callgrind", choices=KINDS)
    args = parser.parse_args()
    if args.child:
        return child()
    env, requests = asyncio.run(_prepare())
    if args.profile or args.callgrind:
        kind = args.profile or args.callgrind
        plan = Plan(
            env,
            requests,
            args.requests,
            args.connections,
            True,
            [kind],
            profile=bool(args.profile),
            callgrind=bool(args.callgrind),
        )
        _run_child(plan, None)
        if args.callgrind:
            # Counted from the start of a `_rounds` to its end: its warm-up too.
            made = _made(args.requests, args.connections)
            ours, floor = (count / made for count in _callgrind_counts())
            print(
                f"callgrind, instructions a request: {kind} {ours:,.0f}, "
                f"floor {floor:,.0f}: {ours / floor:.2f}×"
            )
        return 0
    from tests.bench.baseline import checkout

    labels = ["now"] if args.baseline is None else [args.baseline, "now"]
    best: dict[str, dict[str, float]] = {label: {} for label in labels}
    with contextlib.ExitStack() as stack:
        trees: dict[str, Path | None] = {"now": None}
        if args.baseline is not None:
            tree = stack.enter_context(checkout(args.baseline))
            shutil.copy(__file__, tree / "tests" / "bench" / "refusal_cost.py")
            shutil.copy(Path(__file__).with_name("reference.py"), tree / "tests/bench/reference.py")
            trees[args.baseline] = tree
        for number in range(args.rounds):
            for label in labels:
                plan = Plan(
                    env, requests, args.requests, args.connections, label == "now", list(KINDS)
                )
                got = _run_child(plan, trees[label])
                for key, value in got.items():
                    best[label][key] = min(value, best[label].get(key, value))
                print(
                    f"round {number + 1}, {label}: "
                    + ", ".join(f"{k} {v * 1e6:.0f}" for k, v in got.items()),
                    file=sys.stderr,
                    flush=True,
                )
    print(_table(best, labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
