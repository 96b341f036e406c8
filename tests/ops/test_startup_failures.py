"""Operator mistakes at start, as an operator meets them: the real `elova-mcp` commands run
as child processes with one bad setting or one unavailable dependency each. Every case
must end with its exit status (2: change the configuration; 1: a dependency is down),
exactly one line on stderr naming the setting or cause, and no traceback.

The cases run concurrently (a few at a time) in one module fixture: each is a Python start
of ~0.6 s CPU, and the machine is shared.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import redis.exceptions

from service.cli.failures import explain, postgresql_failure, redis_failure
from tests.ops.tooling import ROOT
from tests.support.keys import ed25519_pem
from tests.support.serve_process import ServeProcess
from tests.support.server import free_port
from tests.support.services import (
    TestDatabase,
    _redis_server_binary,
    create_database,
    drop_database,
)

REDIS_PASSWORD = "s3cret-startup-test"
PG_PASSWORD = "right-pgbouncer-password"


@dataclass(frozen=True)
class Case:
    name: str
    command: tuple[str, ...]
    env: dict[str, str]
    status: int
    says: tuple[str, ...]  # each must be in the line (case-sensitive)
    stdin: str = ""


@dataclass
class Outcome:
    status: int
    stderr: str
    stdout: str
    lines: list[str] = field(default_factory=list)


def _dsn(base: str, **parts: str) -> str:
    split = urlsplit(base)
    netloc = parts.get("netloc", split.netloc)
    return urlunsplit(split._replace(netloc=netloc, path=parts.get("path", split.path),
                                     query=parts.get("query", split.query)))  # fmt: skip


def _closed_port() -> int:
    return free_port()  # nothing listens there once the probe socket is closed


@pytest.fixture(scope="module")
def redis_with_password() -> Iterator[str]:
    """A private redis-server with `requirepass`, on a free loopback port."""
    binary = _redis_server_binary()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is required in CI (Debian: redis-server)")
        pytest.skip("no redis-server installed")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--requirepass", REDIS_PASSWORD],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_for_port(port, proc, "redis-server with requirepass")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def startup_database() -> Iterator[TestDatabase]:
    import asyncio

    database = asyncio.run(create_database("elova_startup"))
    try:
        yield database
    finally:
        asyncio.run(drop_database(database))


@pytest.fixture(scope="module")
def pgbouncer_with_password(startup_database: TestDatabase) -> Iterator[str]:
    """host:port of a PgBouncer with SCRAM password auth in front of the test PostgreSQL
    (which trusts every login): a real wrong-password refusal."""
    binary = shutil.which("pgbouncer")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("pgbouncer is required in CI (.ci/debian-packages.txt)")
        pytest.skip("pgbouncer is not installed")
    target = urlsplit(startup_database.dsn)
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # PgBouncer drops root privileges (-u) and must read these
        users, ini = Path(tmp, "users.txt"), Path(tmp, "pgbouncer.ini")
        users.write_text(f'"{target.username or "postgres"}" "{PG_PASSWORD}"\n')
        ini.write_text(
            "[databases]\n"
            f"* = host={target.hostname or '127.0.0.1'} port={target.port or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            f"auth_type = scram-sha-256\nauth_file = {users}\npool_mode = session\n"
        )
        for path in (users, ini):
            path.chmod(0o644)
        command = [binary, str(ini)]
        if os.geteuid() == 0:
            command[1:1] = ["-u", "postgres"]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_for_port(port, proc, "pgbouncer")
            yield f"127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(10)


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.05)


def _cases(dsn: str, redis_address: str, busy_port: int, snapshot: str, bouncer: str) -> list[Case]:
    key = ed25519_pem().decode()
    down = _dsn(dsn, netloc=f"postgres@127.0.0.1:{_closed_port()}")
    missing = _dsn(dsn, path="/elova_no_such_database")
    no_role = _dsn(dsn, netloc=f"elova_no_such_role@{urlsplit(dsn).netloc.rsplit('@', 1)[-1]}")
    tls = _dsn(dsn, query="sslmode=require")
    user = urlsplit(dsn).username or "postgres"
    wrong_password = _dsn(dsn, netloc=f"{user}:wrong-password@{bouncer}")
    good = {"ELOVA_DATABASE_URL": dsn, "ELOVA_SIGNING_KEY": key, "ELOVA_HOST": "127.0.0.1",
            "ELOVA_PORT": str(free_port()), "ELOVA_DB_POOL_MIN": "1"}  # fmt: skip
    commands: dict[str, tuple[tuple[str, ...], str]] = {
        "serve": (("serve",), ""),
        "migrate": (("migrate",), ""),
        "load": (("load", snapshot), ""),
        "approve": (("approve", "--list", "--account", "nobody@example.com"), ""),
        "account": (("account", "set-password", "--email", "nobody@example.com"), "pw-123456\n"),
        "demo-data": (("demo-data", "--executions", "10"), ""),
    }
    cases = []
    for name, (argv, stdin) in commands.items():
        cases += [
            Case(f"{name}-url-foo", argv, {**good, "ELOVA_DATABASE_URL": "foo"}, 2,
                 ("ELOVA_DATABASE_URL", "postgresql://"), stdin),
            Case(f"{name}-database-down", argv, {**good, "ELOVA_DATABASE_URL": down}, 1,
                 ("cannot reach PostgreSQL", "connection refused", "ELOVA_DATABASE_URL"), stdin),
        ]  # fmt: skip
    serve = ("serve",)
    cases += [
        Case("serve-empty-port", serve, {**good, "ELOVA_PORT": ""}, 2, ("ELOVA_PORT", "empty")),
        Case("migrate-empty-port", ("migrate",), {**good, "ELOVA_PORT": ""}, 2,
             ("ELOVA_PORT", "empty")),
        Case("serve-port-in-use", serve, {**good, "ELOVA_PORT": str(busy_port)}, 1,
             (f"127.0.0.1:{busy_port}", "ELOVA_PORT", "already in use")),
        Case("serve-metrics-port-in-use", serve, {**good, "ELOVA_METRICS_PORT": str(busy_port)},
             1, ("ELOVA_METRICS_PORT", "already in use")),
        Case("serve-no-such-database", serve, {**good, "ELOVA_DATABASE_URL": missing}, 2,
             ("elova_no_such_database", "does not exist", "ELOVA_DATABASE_URL")),
        Case("migrate-no-such-database", ("migrate",), {**good, "ELOVA_DATABASE_URL": missing},
             2, ("elova_no_such_database", "does not exist", "ELOVA_DATABASE_URL")),
        Case("serve-unknown-role", serve, {**good, "ELOVA_DATABASE_URL": no_role}, 2,
             ("refused the login", "elova_no_such_role", "ELOVA_DATABASE_URL")),
        Case("serve-wrong-password", serve, {**good, "ELOVA_DATABASE_URL": wrong_password}, 2,
             ("refused the login", bouncer, "ELOVA_DATABASE_URL")),
        Case("migrate-wrong-password", ("migrate",),
             {**good, "ELOVA_DATABASE_URL": wrong_password}, 2,
             ("refused the login", "ELOVA_DATABASE_URL")),
        Case("load-unknown-role", ("load", snapshot), {**good, "ELOVA_DATABASE_URL": no_role},
             2, ("refused the login", "ELOVA_DATABASE_URL")),
        Case("serve-tls-refused", serve, {**good, "ELOVA_DATABASE_URL": tls}, 2,
             ("TLS to PostgreSQL", "sslmode", "ELOVA_DATABASE_URL")),
        Case("serve-host-unresolvable", serve, {**good, "ELOVA_HOST": "999.1.1.1"}, 2,
             ("ELOVA_HOST=999.1.1.1",)),
        Case("serve-host-not-here", serve, {**good, "ELOVA_HOST": "192.0.2.1"}, 2,
             ("ELOVA_HOST=192.0.2.1", "not an address of this machine")),
        Case("serve-pool-min-above-max", serve,
             {**good, "ELOVA_DB_POOL_MIN": "20", "ELOVA_DB_POOL_MAX": "5"}, 2,
             ("ELOVA_DB_POOL_MIN", "ELOVA_DB_POOL_MAX")),
        Case("serve-public-url-with-path", serve,
             {**good, "ELOVA_PUBLIC_URL": "https://x.example/mcp"}, 2,
             ("ELOVA_PUBLIC_URL", "give the base URL", "the MCP endpoint is https://x.example/mcp")),
        Case("serve-bad-signing-key", serve, {**good, "ELOVA_SIGNING_KEY": "not a key"}, 2,
             ("ELOVA_SIGNING_KEY", "PEM")),
        Case("serve-redis-wrong-password", serve,
             {**good, "ELOVA_REDIS_URL": f"redis://:wrong-password@{redis_address}/0"}, 2,
             ("Redis", redis_address, "refused the login", "ELOVA_REDIS_URL")),
        Case("serve-redis-no-password", serve,
             {**good, "ELOVA_REDIS_URL": f"redis://{redis_address}/0"}, 2,
             ("Redis", "refused the login", "ELOVA_REDIS_URL")),
        Case("demo-data-url-flag-malformed", ("demo-data", "--database-url", "foo"), good, 2,
             ("--database-url", "malformed")),
    ]  # fmt: skip
    return cases


def _run(case: Case) -> Outcome:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
    env.update(case.env)
    done = subprocess.run(
        [sys.executable, "-m", "service", *case.command],
        cwd=ROOT, env=env, input=case.stdin, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return Outcome(done.returncode, done.stderr, done.stdout, done.stderr.splitlines())


@pytest.fixture(scope="module")
def outcomes(
    startup_database: TestDatabase, redis_with_password: str, pgbouncer_with_password: str
) -> Iterator[dict[str, tuple[Case, Outcome]]]:
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        snapshot = Path(tmp, "snapshot.json")
        snapshot.write_text("{}")
        cases = _cases(
            startup_database.dsn,
            redis_with_password,
            busy.getsockname()[1],
            str(snapshot),
            pgbouncer_with_password,
        )
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(_run, cases))
    yield {case.name: (case, outcome) for case, outcome in zip(cases, results, strict=True)}


CASE_NAMES = [
    c.name for c in _cases("postgresql://postgres@127.0.0.1:5432/x", "r:1", 1, "f", "b:1")
]


# The first case pays for `outcomes`, which starts every case's process: 11 to 16 s.
@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_a_start_up_failure_is_one_line(
    name: str, outcomes: dict[str, tuple[Case, Outcome]]
) -> None:
    case, outcome = outcomes[name]
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert len(outcome.lines) == 1, outcome.stderr
    line = outcome.lines[0]
    assert line.startswith(f"elova-mcp {case.command[0]}: "), line
    for expected in case.says:
        assert expected in line, (expected, line)
    assert outcome.status == case.status, line
    for secret in ("wrong-password", REDIS_PASSWORD, PG_PASSWORD):
        assert secret not in line  # no secret echoed


async def test_an_unreachable_redis_at_start_is_not_fatal(serve_env: dict[str, str]) -> None:
    """Redis is connected lazily: down at start, the service starts, ready, and says so."""
    env = {**serve_env, "ELOVA_REDIS_URL": f"redis://127.0.0.1:{_closed_port()}/0"}
    async with ServeProcess(env) as proc:
        ready = await proc.get("/readyz")
        assert ready.status == 200
        warnings = [line for line in proc.log_lines() if line.get("level") == "warning"]
        assert any("Redis does not answer at start" in line["message"] for line in warnings)


def test_a_wrong_postgresql_password_names_the_setting() -> None:
    """The local PostgreSQL trusts every login, so the password refusal is built here."""
    err = asyncpg.InvalidPasswordError('password authentication failed for user "elova"')
    failure = postgresql_failure(err, "postgresql://elova:hunter2@db.internal:6432/elova")
    assert failure is not None and failure.status == 2
    assert "db.internal:6432 refused the login" in failure.message
    assert "ELOVA_DATABASE_URL" in failure.message and "hunter2" not in failure.message


def test_a_certificate_postgresql_does_not_trust_is_a_configuration_error() -> None:
    err = ssl.SSLCertVerificationError(1, "certificate verify failed")
    err.verify_message = "self-signed certificate"
    failure = postgresql_failure(err, "postgresql://elova@db/elova?sslmode=verify-full")
    assert failure is not None and failure.status == 2
    assert "TLS to PostgreSQL at db:5432 failed (certificate verify failed: self-signed" in (
        failure.message
    )


def test_a_dns_failure_that_may_pass_is_not_a_configuration_error() -> None:
    again = postgresql_failure(socket.gaierror(socket.EAI_AGAIN, "Temporary failure"), None)
    never = postgresql_failure(
        socket.gaierror(socket.EAI_NONAME, "Name or service not known"), None
    )
    assert again is not None and again.status == 1
    assert never is not None and never.status == 2


def test_a_bug_keeps_its_traceback() -> None:
    assert explain(RuntimeError("a bug")) is None
    assert explain(asyncpg.UndefinedColumnError("column x does not exist")) is None


def test_redis_tls_failure_stops_the_start_and_an_unreachable_redis_does_not() -> None:
    url = "rediss://:pw@cache.internal:6380/0"
    tls = redis.exceptions.ConnectionError("Error connecting to cache.internal:6380.")
    tls.__cause__ = ssl.SSLError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    failure = redis_failure(tls, url)
    assert failure is not None and failure.status == 2
    assert "TLS to Redis at cache.internal:6380 failed" in failure.message
    assert "ELOVA_REDIS_URL" in failure.message and "pw" not in failure.message.split("(")[0]
    refused = redis.exceptions.ConnectionError("Error 111 connecting to cache.internal:6380.")
    assert redis_failure(refused, url) is None
    assert redis_failure(redis.exceptions.TimeoutError("Timeout"), url) is None
