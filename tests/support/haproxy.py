"""HAProxy in front of test replicas, configured from the shipped deploy/haproxy.cfg.

    with OwnHAProxy(replica_ports) as lb:       # Debian's haproxy, `haproxy -db`, own port
        ... http://127.0.0.1:{lb.port}/mcp ...
        lb.wait_state("mcp-1", "UP")

`render` keeps every setting of the shipped file and changes only where things listen:
each `bind` line binds a free loopback port, and the server lines become one line per
replica (`mcp-1`, `mcp-2`, ...) at 127.0.0.1:<port> with the options of the shipped first
server line. What the tests prove is then what deploy/haproxy.cfg does.

HAProxy's output (its alerts and the log lines, `log stdout`) is read by a thread and kept
with the monotonic time each line arrived, so a test can tell when a server was marked
DOWN or UP.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from tests.support.server import free_port

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deploy" / "haproxy.cfg"
BACKEND = "replicas"
_BIND = re.compile(r"^(\s*)bind\s+\S+(.*)$")
_SERVER = re.compile(r"^(\s*)server\s+\S+\s+\S+(.*)$")
_STATE = re.compile(r"Server (\S+)/(\S+) is (UP|DOWN)")


def haproxy_command() -> str | None:
    """The haproxy binary, or None where it is not installed."""
    return shutil.which("haproxy") or (
        "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None
    )


def render(shipped: str, *, port: int, replica_ports: Sequence[int]) -> str:
    """The shipped configuration listening on `port`, balancing over `replica_ports`."""
    lines: list[str] = []
    servers_done = False
    for line in shipped.splitlines():
        bind = _BIND.match(line)
        server = _SERVER.match(line)
        if bind:
            lines.append(f"{bind.group(1)}bind 127.0.0.1:{port}{bind.group(2)}")
        elif server:
            if not servers_done:
                indent, options = server.group(1), server.group(2)
                lines += [
                    f"{indent}server mcp-{i + 1} 127.0.0.1:{p}{options}"
                    for i, p in enumerate(replica_ports)
                ]
                servers_done = True
        else:
            lines.append(line)
    if not servers_done:
        raise ValueError("the shipped haproxy.cfg has no server line")
    return "\n".join(lines) + "\n"


class OwnHAProxy:
    """`haproxy -db` with the rendered shipped configuration, on a free loopback port."""

    def __init__(
        self, replica_ports: Sequence[int], *, port: int | None = None, shipped: Path = SHIPPED
    ) -> None:
        self.port = port if port is not None else free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="elova-haproxy-"))
        self.config = self.dir / "haproxy.cfg"
        self.config.write_text(
            render(shipped.read_text(), port=self.port, replica_ports=replica_ports)
        )
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[tuple[float, str]] = []  # (monotonic time, line) of state changes
        self.requests_logged = 0
        self._changed = threading.Condition()
        self._reader: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> OwnHAProxy:
        command = haproxy_command()
        if command is None:
            raise RuntimeError("haproxy is not installed (.ci/debian-packages.txt)")
        check = subprocess.run(
            [command, "-c", "-f", str(self.config)], capture_output=True, text=True
        )
        if check.returncode != 0:
            raise RuntimeError(f"haproxy refuses the configuration:\n{check.stdout}{check.stderr}")
        self.proc = subprocess.Popen(
            [command, "-db", "-f", str(self.config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._wait_listening(timeout)
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.monotonic()
            with self._changed:
                if _STATE.search(line) or "ALERT" in line:
                    self.lines.append((now, line.rstrip()))
                else:
                    self.requests_logged += 1
                self._changed.notify_all()

    def _wait_listening(self, timeout: float) -> None:
        import socket

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"haproxy exited: {self.output()}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"haproxy does not listen after {timeout} s: {self.output()}")

    def output(self) -> str:
        with self._changed:
            return "\n".join(line for _, line in self.lines)

    def state_changes(self, server: str) -> list[tuple[float, str]]:
        """(time, "UP"/"DOWN") each time HAProxy marked `server` so."""
        with self._changed:  # a reentrant lock: wait_state holds it too
            changes = []
            for at, line in self.lines:
                match = _STATE.search(line)
                if match and match.group(1) == BACKEND and match.group(2) == server:
                    changes.append((at, match.group(3)))
            return changes

    def wait_state(self, server: str, state: str, *, after: float, timeout: float) -> float:
        """When HAProxy marked `server` `state` (UP/DOWN) after monotonic time `after`."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for at, seen in self.state_changes(server):
                    if at >= after and seen == state:
                        return at
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"HAProxy did not mark {server} {state} in {timeout} s")
                self._changed.wait(left)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> OwnHAProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.stop()
