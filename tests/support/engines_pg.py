"""PostgreSQL engines production puts in front of or beside the primary, started by the
test run itself: Debian's PgBouncer in transaction mode, and a private PostgreSQL cluster
with a streaming standby made by `pg_basebackup -R`. Loopback only, free ports, temporary
folders, stopped at the end; a missing binary skips locally and fails under CI.

PostgreSQL and PgBouncer refuse to run as root: as root the engines run as the `postgres`
OS user (`runuser`), in folders that user owns.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pytest

from tests.support.server import free_port


def _missing(what: str) -> NoReturn:
    message = f"{what} is not installed (Debian: see .ci/debian-packages.txt)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _as_engine_user(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def _engine_dir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")
    return path


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 0.5):
            return True
    except OSError:
        return False


def _wait_listening(port: int, proc: subprocess.Popen[bytes] | None, what: str) -> None:
    deadline = time.monotonic() + 30
    while not _listening(port):
        if time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
            raise RuntimeError(f"{what} did not start on port {port}")
        time.sleep(0.05)


@dataclass
class PgBouncer:
    """PgBouncer in transaction mode in front of one PostgreSQL (trust, an auth file)."""

    port: int
    folder: Path
    proc: subprocess.Popen[bytes]

    def dsn(self, database: str, user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)


def _pgbouncer_binary() -> str:
    binary = shutil.which("pgbouncer", path=f"{os.environ.get('PATH', '')}:/usr/sbin")
    if not binary:
        _missing("pgbouncer")
    return binary


def pgbouncer_version() -> str:
    """E.g. "PgBouncer 1.18.0" (the first line of `pgbouncer --version`)."""
    done = subprocess.run([_pgbouncer_binary(), "--version"], capture_output=True, text=True)
    return done.stdout.splitlines()[0].strip() if done.stdout else "PgBouncer"


def start_pgbouncer(
    upstream_port: int, *, pool_size: int = 4, aliases: dict[str, str] | None = None
) -> PgBouncer:
    """`pool_size` server connections per database and user: small, so that clients share
    them (and would see each other's statements if anything outlived a transaction).
    `aliases`: more database names, each with its options (e.g. `dbname=… connect_query=…`)."""
    binary = _pgbouncer_binary()
    folder = _engine_dir("elova-pgbouncer-")
    port = free_port()
    (folder / "userlist.txt").write_text('"postgres" ""\n')
    extra = "".join(
        f"{name} = host=127.0.0.1 port={upstream_port} {options}\n"
        for name, options in (aliases or {}).items()
    )
    # No ignore_startup_parameters: the service must not send one PgBouncer refuses.
    (folder / "pgbouncer.ini").write_text(
        f"""[databases]
* = host=127.0.0.1 port={upstream_port}
{extra}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder}/userlist.txt
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 500
server_reset_query =
logfile = {folder}/pgbouncer.log
"""
    )
    if os.geteuid() == 0:
        for name in ("userlist.txt", "pgbouncer.ini"):
            shutil.chown(folder / name, "postgres", "postgres")
    proc = subprocess.Popen(
        _as_engine_user([binary, str(folder / "pgbouncer.ini")]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_listening(port, proc, "pgbouncer")
    return PgBouncer(port, folder, proc)


def _pg_bin() -> Path:
    preferred = Path("/usr/lib/postgresql/15/bin")
    found = [preferred] if (preferred / "initdb").exists() else []
    found += [Path(p).parent for p in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))]
    if not found:
        _missing("the PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup)")
    return found[0]


@dataclass
class PrivateCluster:
    """A primary of our own (so its configuration is ours) and its streaming standby."""

    bin: Path
    folder: Path
    primary_port: int
    standby_port: int
    started: list[Path] = field(default_factory=list)

    def primary_dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.primary_port}/{database}"

    def standby_dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.standby_port}/{database}"

    def _run(self, *args: str) -> None:
        subprocess.run(
            _as_engine_user([str(a) for a in args]),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=120,
        )

    def _start(self, data: Path, port: int) -> None:
        options = f"-p {port} -k {self.folder} -c listen_addresses=127.0.0.1"
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(data), "-o", options,
            "-l", str(self.folder / f"{data.name}.log"), "-w", "-t", "60", "start",
        )  # fmt: skip
        self.started.append(data)

    def kill_primary(self) -> None:
        """The primary stops at once, as a crash does (`pg_ctl -m immediate stop`)."""
        primary = self.folder / "primary"
        self._run(str(self.bin / "pg_ctl"), "-D", str(primary), "-m", "immediate", "stop")
        self.started.remove(primary)

    def promote_standby(self) -> None:
        """`pg_ctl promote`, waiting until the standby accepts writes."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.folder / "standby"), "-w", "promote")

    def stop(self) -> None:
        for data in reversed(self.started):
            with contextlib.suppress(subprocess.SubprocessError):
                self._run(str(self.bin / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)


def start_private_cluster() -> PrivateCluster:
    """initdb a primary (trust on loopback, replication allowed), then `pg_basebackup -R`
    a standby from it and start both."""
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        _missing("runuser (PostgreSQL refuses to run as root)")
    cluster = PrivateCluster(_pg_bin(), _engine_dir("elova-pgcluster-"), free_port(), 0)
    primary = cluster.folder / "primary"
    try:
        cluster._run(
            str(cluster.bin / "initdb"), "-D", str(primary), "-A", "trust", "-U", "postgres",
            "-E", "UTF8", "--no-sync",
        )  # fmt: skip
        with open(primary / "postgresql.conf", "a") as conf:
            conf.write("fsync = off\nwal_level = replica\nmax_wal_senders = 4\n")
        cluster._start(primary, cluster.primary_port)
        cluster.standby_port = free_port()
        standby = cluster.folder / "standby"
        cluster._run(
            str(cluster.bin / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(cluster.primary_port),
            "-U", "postgres", "-D", str(standby), "-R", "-X", "stream", "--no-sync",
        )  # fmt: skip
        cluster._start(standby, cluster.standby_port)
    except BaseException:
        cluster.stop()
        raise
    return cluster
