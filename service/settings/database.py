"""PostgreSQL URLs as libpq (and asyncpg) read them: one host or several, in the authority
(`host1:5432,host2:5432`) or in `host=`/`port=` parameters, with `target_session_attrs`
(docs/operations.md, Database failover).

service/config.py checks ELOVA_DATABASE_URL and ELOVA_DATABASE_READ_URL with these (a
ValueError becomes a ConfigError naming the variable); service/store/multi_host.py connects host
by host with `db_hosts` and `session_attrs`. Only what asyncpg would refuse later, or read
differently, is checked; asyncpg parses the rest itself. No message repeats the URL: it
may hold a password.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

# libpq's (and asyncpg's) target_session_attrs; the primary's URL takes the writable ones.
SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")
_PRIMARY_ATTRS = ("read-write", "primary")


def database_url(raw: str) -> str:
    """A libpq URL, one host or several (`host1:5432,host2:5432`, or `?host=…&port=…`), as
    asyncpg connects with it. Only what asyncpg would refuse later, or read differently,
    is checked here; messages never repeat the URL (it may hold a password)."""
    parts = urlsplit(raw)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError("expected a URL such as postgresql://user:password@host:5432/elova")
    hosts = parts.netloc.rpartition("@")[2]
    for address in hosts.split(",") if hosts else ():
        _db_port(address.rpartition("]")[2].rpartition(":")[2] if ":" in address else "")
    query = parse_qs(parts.query, keep_blank_values=True)
    for ports in query.get("port", ()):
        for port in ports.split(","):
            _db_port(port)
    attrs = session_attrs(raw)
    if attrs is not None and attrs not in SESSION_ATTRS:
        raise ValueError(f"target_session_attrs must be one of {', '.join(SESSION_ATTRS)}")
    return raw


def _db_port(raw: str) -> None:
    if raw and not (raw.isdigit() and 0 < int(raw) <= 65535):
        raise ValueError("a host's port is not a TCP port (1 to 65535)")


def session_attrs(url: str) -> str | None:
    """The URL's target_session_attrs (the last one given, as libpq reads it), or None."""
    given = parse_qs(urlsplit(url).query, keep_blank_values=True).get("target_session_attrs")
    return given[-1] if given else None


def db_hosts(url: str) -> list[tuple[str, int | None]]:
    """The (host, port) pairs a libpq URL names, in order: from its authority or its `host=`
    and `port=` parameters (one port for all, or one a host); None: the default port. A
    host in brackets (IPv6) comes without them."""
    parts = urlsplit(url)
    query = parse_qs(parts.query, keep_blank_values=True)
    named = parts.netloc.rpartition("@")[2]
    pairs: list[tuple[str, str]] = []
    if query.get("host"):
        pairs = [(h, "") for h in query["host"][-1].split(",")]
    elif named:
        for address in named.split(","):
            host, _, port = (
                address.rpartition(":") if ":" in address.rpartition("]")[2] else (address, "", "")
            )
            pairs.append((host.strip("[]"), port))
    ports = query["port"][-1].split(",") if query.get("port") else []
    out: list[tuple[str, int | None]] = []
    for n, (host, port) in enumerate(pairs):
        given = port or (
            ports[n] if len(ports) > 1 and n < len(ports) else ports[0] if ports else ""
        )
        out.append((host, int(given) if given else None))
    return out


def host_count(url: str) -> int:
    """How many hosts the URL names, in its authority or in `host=` parameters."""
    return max(len(db_hosts(url)), 1)


def primary_database_url(raw: str) -> str:
    """ELOVA_DATABASE_URL: with several hosts, the pool must be told to find the writable one
    (without target_session_attrs libpq's default, `any`, takes the first that answers)."""
    database_url(raw)
    attrs = session_attrs(raw)
    if attrs is not None and attrs not in _PRIMARY_ATTRS:
        raise ValueError(
            f"target_session_attrs={attrs} would send writes to a standby; use read-write"
        )
    if attrs is None and host_count(raw) > 1:
        raise ValueError(
            "several hosts need target_session_attrs=read-write, so that the service finds "
            "the writable one after a failover"
        )
    return raw
