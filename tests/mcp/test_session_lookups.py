"""The termination lookups of session requests (service/mcp/sessions.py): concurrent requests
share one statement, and each is answered by a lookup that began after it arrived."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg

from service.mcp.sessions import Session, SessionStore
from service.store.failures import STORE_FAILED
from tests.support.services import TestDatabase


class CountedPool:
    """The real pool, counting the lookups; `hold` keeps the first lookup's answer back
    (after its statement ran) until released."""

    def __init__(self, pool: asyncpg.Pool, hold: bool = False) -> None:
        self.pool = pool
        self.lookups = 0
        self.ran = asyncio.Event()
        self.release = asyncio.Event()
        self.hold = hold

    async def fetch(self, query: str, *args: Any, **kwargs: Any) -> list[asyncpg.Record]:
        self.lookups += 1
        rows: list[asyncpg.Record] = await self.pool.fetch(query, *args, **kwargs)
        if self.hold and self.lookups == 1:
            self.ran.set()
            await self.release.wait()
        return rows


def _sessions(store: SessionStore, n: int) -> list[Session]:
    approval = uuid.uuid4()
    out = []
    for _ in range(n):
        session = store.verify(store.issue("2025-11-25", approval), approval)
        assert session is not None
        out.append(session)
    return out


async def test_concurrent_lookups_share_a_statement(db_pool: asyncpg.Pool) -> None:
    store = SessionStore(b"k" * 32)
    sessions = _sessions(store, 30)
    ended = {0, 7, 29}
    for i in ended:
        await store.terminate(db_pool, sessions[i])
    counted = CountedPool(db_pool)
    pool: Any = counted
    answers = await asyncio.gather(*(store.is_terminated(pool, s) for s in sessions))
    assert [i for i, a in enumerate(answers) if a] == sorted(ended)
    assert counted.lookups <= 2  # the first request's own lookup, then one for the rest
    assert await store.is_terminated(pool, sessions[7]) is True
    assert await store.is_terminated(pool, sessions[8]) is False


async def test_a_request_waits_for_a_lookup_that_began_after_it(db_pool: asyncpg.Pool) -> None:
    store = SessionStore(b"k" * 32)
    (session,) = _sessions(store, 1)
    counted = CountedPool(db_pool, hold=True)
    pool: Any = counted
    first = asyncio.create_task(store.is_terminated(pool, session))
    await counted.ran.wait()  # the first lookup ran its statement: the session was live
    await store.terminate(db_pool, session)  # DELETE, on this or any other replica
    second = asyncio.create_task(store.is_terminated(pool, session))
    await asyncio.sleep(0.05)
    assert not second.done()  # it does not take the answer of the lookup in flight
    counted.release.set()
    assert await first is False
    assert await second is True
    assert counted.lookups == 2


async def test_a_failed_lookup_fails_its_requests_and_the_next_one_runs(
    db_pool: asyncpg.Pool, test_database: TestDatabase
) -> None:
    store = SessionStore(b"k" * 32)
    sessions = _sessions(store, 3)
    closed = await asyncpg.create_pool(test_database.dsn, min_size=1, max_size=1)
    await closed.close()  # a store that cannot answer
    results = await asyncio.gather(
        *(store.is_terminated(closed, s) for s in sessions), return_exceptions=True
    )
    assert all(isinstance(r, asyncpg.InterfaceError) for r in results)
    assert isinstance(results[0], STORE_FAILED)  # answered 503 with Retry-After
    assert await store.is_terminated(db_pool, sessions[0]) is False
