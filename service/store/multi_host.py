"""Opening a pool's connection on a URL that names several hosts, as libpq does it: each host
in turn, each with its own connect timeout (ELOVA_DATABASE_CONNECT_TIMEOUT_SECONDS), until
one matches target_session_attrs; the host that gave the last good connection is tried
first. A URL with one host is connected as asyncpg does it; `prefer-standby` keeps its
meaning (a standby if any host is one, else any host). Why not asyncpg's own multi-host
connect: docs/decisions/engines.md, "Failover: multi-host URLs and silent servers".
"""

from __future__ import annotations

import logging
from typing import Any

import asyncpg

from service.settings.database import db_hosts, session_attrs

log = logging.getLogger(__name__)

# A host that fails this way is skipped for the next (libpq: a connection or startup
# failure); a refused login or a missing database is an answer, not a host to skip.
NEXT_HOST = (
    OSError,
    TimeoutError,
    asyncpg.CannotConnectNowError,
    asyncpg.TargetServerAttributeNotMatched,
)


class HostByHost:
    """The pool's `connect`: asyncpg.connect's signature, one host at a time."""

    def __init__(self, dsn: str, timeout: float) -> None:
        self._hosts = db_hosts(dsn)
        self._timeout = timeout
        attrs = session_attrs(dsn) or "any"
        # prefer-standby: first a standby among all hosts, then any host.
        self._passes = ("standby", "any") if attrs == "prefer-standby" else (attrs,)
        self._last_good: tuple[str, int | None] | None = None

    @property
    def hosts(self) -> int:
        return len(self._hosts)

    def _in_order(self) -> list[tuple[str, int | None]]:
        good = self._last_good
        return [good, *(h for h in self._hosts if h != good)] if good else list(self._hosts)

    async def __call__(self, dsn: str, **kwargs: Any) -> asyncpg.Connection:
        kwargs.pop("timeout", None)
        last: BaseException | None = None
        for attrs in self._passes:
            for host, port in self._in_order():
                try:
                    conn = await asyncpg.connect(
                        dsn,
                        host=host,
                        port=port,
                        timeout=self._timeout,
                        target_session_attrs=attrs,
                        **kwargs,
                    )
                except NEXT_HOST as err:
                    last = err
                    continue
                if self._last_good != (host, port):
                    if self._last_good is not None:
                        log.warning("PostgreSQL: connections now go to %s:%s", host, port or "")
                    self._last_good = (host, port)
                return conn
        assert last is not None
        raise last
