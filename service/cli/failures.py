"""Start-up failures in one line: what is wrong, the setting or cause, and the fix.

Every command runs through `service.__main__`, which hands any exception that escapes a
command to `explain`. What an operator can fix becomes one line on stderr,
`elova-mcp <command>: <what is wrong>; <what to do>`, and exit status 2 (the configuration
must change) or 1 (the same settings may work later); anything else is a bug and keeps its
traceback. The `*_failure` functions turn one dependency's exceptions into a
`StartupFailure`; the checks that raise them are in `service.cli.preflight`. Nothing here
prints a URL: it may hold a password. Which failure is which status: docs/decisions/ops.md,
"Start-up failures (issue 14)"; what on-call sees: docs/operations.md, "When a start fails".
"""

from __future__ import annotations

import errno
import os
import socket
import ssl
import sys
from urllib.parse import urlsplit

import asyncpg
import redis.exceptions

from service.errors import ConfigError, StartupFailure

BAD_CONFIGURATION = 2
UNAVAILABLE = 1


def report(prog: str, failure: StartupFailure) -> int:
    """Write the one line; the exit status to return."""
    sys.stderr.write(f"{prog}: {failure.message}\n")
    sys.stderr.flush()
    return failure.status


def explain(err: BaseException, dsn: str | None = None) -> StartupFailure | None:
    """The one-line form of an exception that escaped a command, or None for a bug.

    Outside a preflight check the only dependency a command talks to is PostgreSQL, so a
    driver or socket error is read as PostgreSQL's (`dsn`, when known, says where)."""
    if isinstance(err, StartupFailure):
        return err
    if isinstance(err, ConfigError):
        return StartupFailure(f"configuration error: {err}", BAD_CONFIGURATION)
    return postgresql_failure(err, dsn)


def _where(url: str | None, default_port: int) -> str:
    """host:port of a URL, without its user or password."""
    if not url:
        return "the configured address"
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    if "," in hosts:  # a multi-host URL: every host:port it names
        return hosts
    try:
        port = parts.port or default_port
    except ValueError:
        return "the configured address"
    host = parts.hostname or "localhost"
    return f"{host}:{port}"


def _tls_reason(err: BaseException) -> str | None:
    for cause in (err, err.__cause__, err.__context__):
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {cause.verify_message}"
        if isinstance(cause, ssl.SSLError):
            return getattr(cause, "reason", None) or str(cause)
    if "SSL" in str(err) and isinstance(err, ConnectionError):
        return "the server does not offer TLS" if "rejected SSL" in str(err) else str(err)
    return None


def postgresql_failure(
    err: BaseException, dsn: str | None, setting: str = "ELOVA_DATABASE_URL"
) -> StartupFailure | None:
    """PostgreSQL's refusals at connect time, each naming the setting that holds the URL;
    None for any other error (a bug keeps its traceback)."""
    where = _where(dsn, 5432)
    tls = _tls_reason(err)
    if tls is not None:
        return StartupFailure(
            f"TLS to PostgreSQL at {where} failed ({tls}); fix sslmode or the certificates "
            f"in {setting}",
            BAD_CONFIGURATION,
        )
    if isinstance(err, asyncpg.InvalidCatalogNameError):
        return StartupFailure(
            f"PostgreSQL at {where}: {err}; create it or fix the database name in {setting}",
            BAD_CONFIGURATION,
        )
    # PgBouncer answers a wrong SCRAM password with a protocol violation, not 28P01.
    bouncer_login = isinstance(err, asyncpg.ProtocolViolationError) and (
        "authentication failed" in str(err)
    )
    if bouncer_login or isinstance(
        err, (asyncpg.InvalidAuthorizationSpecificationError, asyncpg.InvalidPasswordError)
    ):
        return StartupFailure(
            f"PostgreSQL at {where} refused the login ({err}); fix the user or password "
            f"in {setting}",
            BAD_CONFIGURATION,
        )
    if isinstance(err, asyncpg.CannotConnectNowError | asyncpg.TooManyConnectionsError):
        return StartupFailure(
            f"PostgreSQL at {where} does not take connections now ({err}); try again later",
            UNAVAILABLE,
        )
    if isinstance(err, socket.gaierror):
        status = UNAVAILABLE if err.errno == socket.EAI_AGAIN else BAD_CONFIGURATION
        return StartupFailure(
            f"the PostgreSQL host in {setting} does not resolve ({err.strerror}); fix the host",
            status,
        )
    if isinstance(err, TimeoutError):
        return StartupFailure(
            f"PostgreSQL at {where} did not answer in time; check that it runs and that "
            f"{setting} names it",
            UNAVAILABLE,
        )
    if isinstance(err, ConnectionError) or (isinstance(err, OSError) and err.errno in _UNREACHABLE):
        reason = os.strerror(err.errno).lower() if err.errno else str(err)
        return StartupFailure(
            f"cannot reach PostgreSQL at {where} ({reason}); start it, or fix the host and "
            f"port in {setting}",
            UNAVAILABLE,
        )
    return None


_UNREACHABLE = frozenset(
    {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT, errno.ENOENT}
)


def redis_failure(err: BaseException, url: str) -> StartupFailure | None:
    """A Redis refusal that no retry fixes (login, TLS); None for an unreachable Redis,
    which only degrades the limits (the service starts and stays ready)."""
    where = _where(url, 6379)
    tls = _tls_reason(err)
    if tls is not None:
        return StartupFailure(
            f"TLS to Redis at {where} failed ({tls}); fix the certificates or the scheme "
            "(rediss://) of ELOVA_REDIS_URL",
            BAD_CONFIGURATION,
        )
    refused_login = isinstance(
        err, redis.exceptions.AuthenticationError | redis.exceptions.AuthorizationError
    ) or (
        isinstance(err, redis.exceptions.ResponseError)
        and str(err).startswith(("NOAUTH", "WRONGPASS", "NOPERM"))
    )
    if refused_login:
        return StartupFailure(
            f"Redis at {where} refused the login ({err}); fix the user or password in "
            "ELOVA_REDIS_URL (redis://:PASSWORD@host:6379/0)",
            BAD_CONFIGURATION,
        )
    return None


def malformed_url(err: BaseException, setting: str) -> StartupFailure:
    """A database URL the driver cannot parse (asyncpg reads more than the scheme)."""
    return StartupFailure(
        f"{setting} is malformed ({err}); give a URL such as "
        "postgresql://user:password@host:5432/elova",
        BAD_CONFIGURATION,
    )


def listen_failure(err: OSError, host: str, port: int, setting: str) -> StartupFailure:
    """Why a listener cannot bind (host, port); `setting` is the port's variable."""
    address = f"{host}:{port}"
    if isinstance(err, socket.gaierror):
        return StartupFailure(
            f"ELOVA_HOST={host} is not an address this machine can listen on "
            f"({err.strerror}); use an address such as 127.0.0.1 or 0.0.0.0",
            BAD_CONFIGURATION,
        )
    if err.errno == errno.EADDRINUSE:
        return StartupFailure(
            f"cannot listen on {address} ({setting}): the address is already in use; stop "
            f"the other process or set {setting} to a free port",
            UNAVAILABLE,
        )
    if err.errno == errno.EADDRNOTAVAIL:
        return StartupFailure(
            f"ELOVA_HOST={host} is not an address of this machine; use one of its "
            "addresses, 127.0.0.1 or 0.0.0.0",
            BAD_CONFIGURATION,
        )
    if err.errno == errno.EACCES:
        return StartupFailure(
            f"cannot listen on {address} ({setting}): permission denied; ports below 1024 "
            f"need privileges, set {setting} to 1024 or above",
            BAD_CONFIGURATION,
        )
    return StartupFailure(
        f"cannot listen on {address} ({setting}): {(err.strerror or str(err)).lower()}",
        UNAVAILABLE,
    )
