"""The real service for end-to-end tests: `elova-mcp serve` child processes, or the same app
in-process on a loopback port, against a test database.

    with ServeProcesses(test_database.dsn, replicas=2) as server:   # sync or `async with`
        token = await server.approve(account="a@example.test", workspaces=[ws_id])
        ... http://127.0.0.1:<port>/mcp for each of server.base_urls ...

    async with InProcessServer(test_database.dsn) as server:        # same interface
        ...

Every server gets a fresh Ed25519 signing key and a fresh Redis key prefix unless the
caller sets them; replicas share the key, the prefix and one `ELOVA_PUBLIC_URL` (the token
audience, docs/limits.md), exactly as a deployment behind a load balancer does. Keyword
`env` overrides are `ELOVA_*` settings (the prefix may be left off); a value of None
removes the setting. Start-up waits for `/livez` and fails with the server's own output.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from service.config import Config
from tests.support.keys import ed25519_pem
from tests.support.services import REDIS_URL, new_redis_prefix

if TYPE_CHECKING:
    from aiohttp import web

    from service.auth.approvals import IssuedTokens

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_SECONDS = 30.0


def free_port() -> int:
    """A loopback port free right now (the caller binds it soon after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def server_env(
    database_url: str, *, ports: Sequence[int], env: Mapping[str, str | None] | None = None
) -> dict[str, str]:
    """The ELOVA_* settings shared by every replica (ELOVA_PORT is set per replica)."""
    settings: dict[str, str] = {
        "ELOVA_DATABASE_URL": database_url,
        "ELOVA_REDIS_URL": REDIS_URL,
        "ELOVA_REDIS_KEY_PREFIX": new_redis_prefix(),
        "ELOVA_SIGNING_KEY": ed25519_pem().decode(),
        "ELOVA_HOST": "127.0.0.1",
        "ELOVA_PUBLIC_URL": f"http://127.0.0.1:{ports[0]}",
        "ELOVA_DB_POOL_MIN": "1",
        "ELOVA_DB_POOL_MAX": "4",
        "ELOVA_LOG_LEVEL": "WARNING",
        # Tests share 2 cores: a late loop or a burst of concurrent calls must not turn
        # answers into load-shedding 503s (tests of shedding set their own).
        "ELOVA_SHED_LOOP_LAG_MS": "0",
        "ELOVA_SHED_ADMISSION": "fixed",
        "ELOVA_SHED_MAX_INFLIGHT": "10000",
        # Every registration of the run comes from 127.0.0.1: the per-address limit must
        # not refuse the suite (tests of the limit set their own).
        "ELOVA_OAUTH_REGISTER_BURST": "100000",
    }
    for key, value in (env or {}).items():
        name = key if key.startswith("ELOVA_") else f"ELOVA_{key}"
        if value is None:
            settings.pop(name, None)
        else:
            settings[name] = str(value)
    return settings


class _Server:
    """What both kinds of server share: ports, settings, URLs, approvals."""

    def __init__(
        self,
        database_url: str,
        *,
        replicas: int = 1,
        env: Mapping[str, str | None] | None = None,
        ports: Sequence[int] | None = None,
    ) -> None:
        if replicas < 1:
            raise ValueError("at least one replica")
        self.ports = list(ports) if ports is not None else [free_port() for _ in range(replicas)]
        if len(self.ports) != replicas:
            raise ValueError("one port per replica")
        self.env = server_env(database_url, ports=self.ports, env=env)

    @property
    def base_urls(self) -> list[str]:
        """Where each replica listens (its own address, not necessarily the public URL)."""
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    @property
    def base_url(self) -> str:
        return self.base_urls[0]

    @property
    def mcp_url(self) -> str:
        return self.base_url + "/mcp"

    @property
    def public_url(self) -> str:
        return self.env["ELOVA_PUBLIC_URL"]

    def config(self) -> Config:
        """The configuration the replicas run with (to issue tokens they accept)."""
        return Config.from_env({**self.env, "ELOVA_PORT": str(self.ports[0])})

    async def approve(
        self,
        *,
        account: str,
        workspaces: Sequence[str | uuid.UUID],
        scope: str = "workspaces:read n8n:read",
        expires: str = "1d",
    ) -> IssuedTokens:
        """A real approval (what `elova-mcp approve` does) and its first tokens."""
        import asyncpg

        from service.cli.approve import approve

        cfg = self.config()
        conn = await asyncpg.connect(cfg.database_url)
        try:
            return await approve(
                conn, cfg, account=account, workspaces=workspaces, scope=scope, expires=expires
            )
        finally:
            await conn.close()


def _live(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url + "/livez", timeout=1) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _serve_command() -> list[str]:
    script = Path(sys.executable).with_name("elova-mcp")
    if script.exists():
        return [str(script), "serve"]
    return [sys.executable, "-m", "service", "serve"]


class ServeProcesses(_Server):
    """`replicas` real `elova-mcp serve` processes sharing one configuration.

    Usable as a sync or async context manager; starting blocks until every /livez answers.
    Output (stdout and stderr) goes to one temporary file a replica: see `output(i)`.
    """

    def __init__(
        self,
        database_url: str,
        *,
        replicas: int = 1,
        env: Mapping[str, str | None] | None = None,
        ports: Sequence[int] | None = None,
        graceful_stop: bool = False,
    ) -> None:
        super().__init__(database_url, replicas=replicas, env=env, ports=ports)
        self.graceful_stop = graceful_stop
        self._procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[Path] = []

    def start(self, timeout: float = START_TIMEOUT_SECONDS) -> ServeProcesses:
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
        for port in self.ports:
            fd, name = tempfile.mkstemp(prefix=f"elova-serve-{port}-", suffix=".log")
            log = Path(name)
            self._logs.append(log)
            with os.fdopen(fd, "wb") as out:
                self._procs.append(
                    subprocess.Popen(
                        _serve_command(),
                        env={**base_env, **self.env, "ELOVA_PORT": str(port)},
                        cwd=ROOT,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
        try:
            self._wait_live(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_live(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = set(range(len(self._procs)))
        while pending:
            for i in sorted(pending):
                if self._procs[i].poll() is not None:
                    raise RuntimeError(
                        f"elova-mcp serve (replica {i}) exited with {self._procs[i].returncode}:"
                        f"\n{self.output(i)}"
                    )
                if _live(self.base_urls[i]):
                    pending.discard(i)
            if pending and time.monotonic() > deadline:
                i = min(pending)
                raise RuntimeError(
                    f"elova-mcp serve (replica {i}) not live after {timeout:.0f} s:"
                    f"\n{self.output(i)}"
                )
            if pending:
                time.sleep(0.1)

    def output(self, replica: int = 0) -> str:
        try:
            return self._logs[replica].read_text("utf-8", errors="replace")
        except (IndexError, OSError):
            return ""

    def stop(self) -> None:
        """Stop every replica: SIGTERM and wait (graceful_stop) or SIGKILL."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM if self.graceful_stop else signal.SIGKILL)
        for proc in self._procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()
        for log in self._logs:
            log.unlink(missing_ok=True)
        self._logs.clear()

    def __enter__(self) -> ServeProcesses:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.stop()

    async def __aenter__(self) -> ServeProcesses:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        await asyncio.to_thread(self.stop)


class InProcessServer(_Server):
    """The same app (`create_app`) served by aiohttp AppRunners in this event loop."""

    def __init__(
        self,
        database_url: str,
        *,
        replicas: int = 1,
        env: Mapping[str, str | None] | None = None,
        ports: Sequence[int] | None = None,
    ) -> None:
        super().__init__(database_url, replicas=replicas, env=env, ports=ports)
        self._runners: list[web.AppRunner] = []
        self.apps: list[web.Application] = []

    async def start(self) -> InProcessServer:
        from aiohttp import web

        from service.app import create_app

        try:
            for port in self.ports:
                app = create_app(Config.from_env({**self.env, "ELOVA_PORT": str(port)}))
                runner = web.AppRunner(app, access_log=None)
                self._runners.append(runner)
                await runner.setup()
                await web.TCPSite(runner, "127.0.0.1", port).start()
                self.apps.append(app)
        except BaseException:
            await self.stop()
            raise
        return self

    async def stop(self) -> None:
        runners, self._runners = self._runners, []
        for runner in reversed(runners):
            await runner.cleanup()
        self.apps.clear()

    async def __aenter__(self) -> InProcessServer:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        await self.stop()
