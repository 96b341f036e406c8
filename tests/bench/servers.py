"""The processes a benchmark runs: our service (`elova-mcp serve`, one replica), the two
reference servers, and the load generator; plus the RSS sampler of a server process.

Every server listens on a free 127.0.0.1 port, gets the same database pool size, writes its
stdout and stderr to a file (as a log collector reads them) and is stopped with SIGTERM.
Ours runs in one of two profiles: `quiet` (warnings only, the audit trail to a file of its
own: serving without the request log) or `shipped` (every setting at its default but what
the run needs: database, Redis, key, port, pool size, and limits raised so that nothing
refuses; so INFO access lines and the audit trail on stdout).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import msgspec

from tests.bench.loadgen import Job, Request, Result

ROOT = Path(__file__).resolve().parents[2]
POOL_SIZE = "10"
BIG = "1000000000"
# Limits raised so that admission never refuses, with Redis admission on: every call still
# runs the admit and release scripts (docs/limits.md) — the cost is measured, not skipped.
RAISED_LIMITS = {
    "ELOVA_LIMIT_GLOBAL_CONCURRENCY": BIG,
    "ELOVA_LIMIT_ACCOUNT_CONCURRENCY": BIG,
    "ELOVA_LIMIT_APPROVAL_PER_MINUTE": BIG,
    # Throughput runs drive a replica to saturation on purpose: load shedding would refuse
    # part of that load. A run measuring shedding (4x overload) leaves these two out.
    "ELOVA_SHED_LOOP_LAG_MS": "0",
    "ELOVA_SHED_ADMISSION": "fixed",
    "ELOVA_SHED_MAX_INFLIGHT": BIG,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid


QUIET, SHIPPED = "quiet", "shipped"
# Settings a profile leaves at their default even when this process's environment has them.
_PROFILE_SETTINGS = ("ELOVA_LOG_LEVEL", "ELOVA_AUDIT_SINK")


def service_env(
    dsn: str, port: int, redis_url: str, prefix: str, key_pem: bytes, profile: str = QUIET
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _PROFILE_SETTINGS}
    if profile == QUIET:
        audit = Path(tempfile.gettempdir()) / f"elova-bench-audit-{port}.log"
        env.update({"ELOVA_LOG_LEVEL": "WARNING", "ELOVA_AUDIT_SINK": f"file:{audit}"})
    elif profile != SHIPPED:
        raise ValueError(f"unknown profile {profile!r}")
    env.update(
        {
            "ELOVA_DATABASE_URL": dsn,
            "ELOVA_REDIS_URL": redis_url,
            "ELOVA_REDIS_KEY_PREFIX": prefix,
            "ELOVA_SIGNING_KEY": key_pem.decode(),
            "ELOVA_HOST": "127.0.0.1",
            "ELOVA_PORT": str(port),
            "ELOVA_PUBLIC_URL": f"http://127.0.0.1:{port}",
            "ELOVA_DB_POOL_MIN": POOL_SIZE,
            "ELOVA_DB_POOL_MAX": POOL_SIZE,
            **RAISED_LIMITS,
        }
    )
    return env


def _wait_listening(server: Server, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited: {server.log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{server.name} did not listen within {timeout}s")


@contextmanager
def running(
    name: str, command: list[str], port: int, env: Mapping[str, str], logs: Path,
    cwd: Path = ROOT,
) -> Iterator[Server]:  # fmt: skip
    log = logs / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=cwd, env=dict(env), stdout=out, stderr=out)
    server = Server(name, port, process, log)
    try:
        _wait_listening(server)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def load(job: Job) -> Result:
    """Run the load generator as a process of its own and return its result."""
    done = subprocess.run(
        python("-m", "tests.bench.loadgen"),
        cwd=ROOT,
        input=msgspec.json.encode(job),
        capture_output=True,
        timeout=job.warmup_seconds + job.duration_seconds + 120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed: {done.stderr.decode()[-2000:]}")
    return msgspec.json.decode(done.stdout, type=Result)


def job(port: int, requests: list[Request], **kw: object) -> Job:
    return Job(host="127.0.0.1", port=port, requests=requests, **kw)  # type: ignore[arg-type]


class RssSampler:
    """Samples a process's resident set size (VmRSS) every 100 ms in a thread of its own,
    while the load generator (a blocking subprocess call) runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def read(self) -> dict[str, int]:
        values = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                values[name] = int(rest.split()[0])
        return values

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self.peak_kib = max(self.peak_kib, self.read().get("VmRSS", 0))
            except OSError:
                return

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class CpuAccount:
    """CPU time (user + system) used while a throughput run lasts, by the server under test
    (its pid), by PostgreSQL (every `postgres` process: the pool's backends) and by Redis,
    read from /proc. Divided by the calls made it tells what a call costs each of them, the
    number that explains req/s on a machine whose 2 cores all of them share."""

    GROUPS = ("server", "postgres", "redis")

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.used: dict[str, float] = {}

    def _snapshot(self) -> dict[int, tuple[str, float]]:
        tick = os.sysconf("SC_CLK_TCK")
        out = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            pid = int(entry.name)
            group = (
                "server" if pid == self.server_pid
                else "postgres" if name.startswith("postgres")
                else "redis" if name.startswith("redis-server")
                else ""
            )  # fmt: skip
            if group:
                out[pid] = (group, (int(fields[11]) + int(fields[12])) / tick)
        return out

    def __enter__(self) -> CpuAccount:
        self._before = self._snapshot()
        return self

    def __exit__(self, *exc: object) -> None:
        used: dict[str, float] = dict.fromkeys(self.GROUPS, 0.0)
        for pid, (group, seconds) in self._snapshot().items():
            used[group] += seconds - self._before.get(pid, (group, 0.0))[1]
        self.used = used

    def per_call_ms(self, calls: float) -> dict[str, float]:
        return {group: 1000 * seconds / max(calls, 1.0) for group, seconds in self.used.items()}
