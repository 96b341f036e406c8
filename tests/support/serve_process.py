"""`elova-mcp serve` as a real child process: free ports, stdout captured to a file."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from tests.ops.tooling import ROOT
from tests.support.server import free_port


class ServeProcess:
    """Start the service with `env` (ELOVA_* settings), wait until /livez answers."""

    def __init__(self, env: dict[str, str]) -> None:
        self.port, self.metrics_port = free_port(), free_port()
        self.env = {
            **os.environ,
            **env,
            "ELOVA_HOST": "127.0.0.1",
            "ELOVA_PORT": str(self.port),
            "ELOVA_METRICS_PORT": str(self.metrics_port),
            "ELOVA_PUBLIC_URL": f"http://127.0.0.1:{self.port}",
        }
        self._log = Path(tempfile.mkstemp(prefix="elova-serve-", suffix=".log")[1])
        self._proc: subprocess.Popen[bytes] | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> ServeProcess:
        with self._log.open("wb") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "service", "serve"],
                env=self.env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self._session = aiohttp.ClientSession()
        for _ in range(100):
            if self._proc.poll() is not None:
                raise RuntimeError(f"serve exited early:\n{self._log.read_text()}")
            try:
                async with self._session.get(f"{self.base}/livez") as resp:
                    if resp.status == 200:
                        return self
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.1)
        raise RuntimeError(f"serve did not start:\n{self._log.read_text()}")

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        if self._session is not None:
            await self._session.close()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._log.unlink(missing_ok=True)

    async def get(self, path: str, **kwargs: Any) -> aiohttp.ClientResponse:
        assert self._session is not None
        resp = await self._session.get(self.base + path, **kwargs)
        await resp.read()
        return resp

    async def scrape(self) -> str:
        assert self._session is not None
        async with self._session.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as resp:
            return await resp.text()

    def terminate(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGTERM)

    async def wait(self, timeout: float) -> int:
        assert self._proc is not None
        proc = self._proc
        return await asyncio.wait_for(asyncio.to_thread(proc.wait), timeout)

    def output(self) -> str:
        return self._log.read_text()

    def log_lines(self) -> list[dict[str, Any]]:
        """Every stdout line, each of which must be one JSON object."""
        return [json.loads(line) for line in self.output().splitlines() if line.strip()]
