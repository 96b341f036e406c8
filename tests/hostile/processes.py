"""Real processes for fault tests, all our own: a PostgreSQL cluster, a redis-server and
`elova-mcp serve` replicas, each on a free loopback port, each stoppable by its own pid.

The machine's shared PostgreSQL (5432) and Redis (6379) are never stopped: a test that
restarts a dependency starts its own. PostgreSQL refuses to run as root, so as root the
cluster runs as the `postgres` system user.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import aiohttp

from tests.support.server import free_port, server_env

PG_BIN = Path(os.environ.get("ELOVA_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
ROOT = Path(__file__).resolve().parents[2]


def _as_postgres() -> list[str]:
    if os.geteuid() != 0:
        return []
    pwd.getpwnam("postgres")  # KeyError: no user to run PostgreSQL as
    return ["runuser", "-u", "postgres", "--"]


class OwnPostgres:
    """A throwaway PostgreSQL cluster (trust auth, fsync off) on a free port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="elova-hostile-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "pg.log"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        subprocess.run([*_as_postgres(), *args], check=True, capture_output=True, timeout=60)

    def init(self) -> OwnPostgres:
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
        self._run(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  "--no-sync", "-E", "UTF8")  # fmt: skip
        return self.start()

    def start(self) -> OwnPostgres:
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c full_page_writes=off -c max_connections=100"
        )
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                  "-o", options, "-w", "-t", "30", "start")  # fmt: skip
        return self

    def stop(self, mode: str = "fast") -> None:
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


class OwnRedis:
    """A redis-server of our own (no persistence) that can be killed and started again."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> OwnRedis:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait_port(self.port)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None


def _wait_port(port: int, timeout: float = 15.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


class Replicas:
    """`elova-mcp serve` processes sharing one configuration; each can be signalled alone."""

    def __init__(
        self,
        database_url: str,
        *,
        replicas: int = 1,
        env: Mapping[str, str | None] | None = None,
        metrics: bool = False,
    ) -> None:
        self.ports = [free_port() for _ in range(replicas)]
        # With `metrics`, each replica gets its own /metrics listener.
        self.metrics_ports = [free_port() for _ in range(replicas)] if metrics else []
        self.env = server_env(database_url, ports=self.ports, env=env)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def url(self, i: int = 0) -> str:
        return f"http://127.0.0.1:{self.ports[i]}"

    def start(self) -> Replicas:
        for i in range(len(self.ports)):
            self.procs.append(self._spawn(i))
        try:
            for port in self.ports:
                _wait_port(port, 30)
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self, i: int) -> None:
        """Start replica `i` again (same port and settings) once its process has exited;
        its output is appended to the same log. Returns without waiting for it to listen."""
        if self.procs[i].poll() is None:
            raise RuntimeError(f"replica {i} is still running")
        self.procs[i] = self._spawn(i)

    def _spawn(self, i: int) -> subprocess.Popen[bytes]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
        script = Path(sys.executable).with_name("elova-mcp")
        command = [str(script), "serve"]
        if not script.exists():
            command = [sys.executable, "-m", "service", "serve"]
        if len(self.logs) <= i:
            fd, name = tempfile.mkstemp(prefix=f"elova-hostile-{self.ports[i]}-", suffix=".log")
            os.close(fd)
            self.logs.append(Path(name))
        env = {**base, **self.env, "ELOVA_PORT": str(self.ports[i])}
        if self.metrics_ports:
            env["ELOVA_METRICS_PORT"] = str(self.metrics_ports[i])
        with self.logs[i].open("ab") as out:
            return subprocess.Popen(
                command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
            )

    def output(self, i: int = 0) -> str:
        return self.logs[i].read_text("utf-8", errors="replace")

    def signal(self, i: int, sig: int) -> None:
        self.procs[i].send_signal(sig)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)
        for log in self.logs:
            log.unlink(missing_ok=True)


async def wait_live(session: aiohttp.ClientSession, url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            async with session.get(url + "/livez") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} is not live after {timeout} s")
