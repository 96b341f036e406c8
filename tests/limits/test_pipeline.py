"""The admission's script calls are pipelined (service/limits/pipeline.py), against real
Redis: concurrent calls share batches and each gets its own reply, in order; a batch that
cannot be sent fails every call in it; a flushed script is reloaded and the call retried."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from service.limits.pipeline import Script, ScriptPipeline
from service.limits.redis_client import make_client
from tests.limits.conftest import RedisServer, free_port
from tests.support.services import REDIS_URL


@pytest.fixture
async def redis() -> AsyncIterator[aioredis.Redis]:
    client = make_client(REDIS_URL, timeout=1.0)
    yield client
    await client.aclose()


def _keys(prefix: str, n: int) -> list[str]:
    """admit.lua's keys for account `n`: all in its hash slot (script_calls.py)."""
    base = f"{prefix}limits:{{{n}}}:"
    return [f"{base}account", f"{base}approval:{n}", f"{base}daily", f"{base}cancelled"]


async def test_concurrent_calls_share_batches_and_get_their_own_replies(
    redis: aioredis.Redis, key_prefix: str
) -> None:
    admit, release = Script("admit.lua"), Script("release.lua")
    pipe = ScriptPipeline(redis)
    big = 1_000_000
    calls = [
        pipe.call(admit, _keys(key_prefix, n % 4), [f"r{n}", big, big, 60_000, 0])
        for n in range(60)
    ]
    replies = await asyncio.gather(*calls)
    assert all(reply[0] == 1 for reply in replies)
    assert pipe.calls == 60 and pipe.batches < 60  # one write carried several calls
    # Releases of the same ids, each freeing exactly its own lease.
    freed = await asyncio.gather(
        *(pipe.call(release, _keys(key_prefix, n % 4), [f"r{n}", 0, 60_000, big, 0])
          for n in range(60))
    )  # fmt: skip
    assert freed == [1] * 60
    assert await redis.zcard(_keys(key_prefix, 0)[0]) == 0


async def test_calls_reach_redis_in_the_order_they_were_made(
    redis: aioredis.Redis, key_prefix: str
) -> None:
    """A release queued before an admission of the same id is never overtaken by it: the
    admission after it takes the slot again (were the order swapped, it would be freed)."""
    admit, release = Script("admit.lua"), Script("release.lua")
    pipe = ScriptPipeline(redis)
    keys, big = _keys(key_prefix, 9), 1_000_000
    for _ in range(20):
        await pipe.call(admit, keys, ["same", big, big, 60_000, 0])
        # Both queued in the same loop iteration, the release first.
        released = asyncio.ensure_future(pipe.call(release, keys, ["same", 0, 60_000, big, 0]))
        admitted = asyncio.ensure_future(pipe.call(admit, keys, ["same", big, big, 60_000, 0]))
        assert (await released, (await admitted)[0]) == (1, 1)
        assert await redis.zscore(keys[0], "same") is not None
        await pipe.call(release, keys, ["same", 0, 60_000, big, 0])


async def test_a_batch_that_cannot_be_sent_fails_every_call_in_it(key_prefix: str) -> None:
    client = make_client(f"redis://127.0.0.1:{free_port()}/0", timeout=0.25)
    pipe = ScriptPipeline(client)
    admit = Script("admit.lua")
    admit.sha = "0" * 40  # skip the load: the write itself must fail
    results = await asyncio.gather(
        *(pipe.call(admit, _keys(key_prefix, n), [f"r{n}", 1, 1, 1000, 0]) for n in range(5)),
        return_exceptions=True,
    )
    assert all(isinstance(r, (RedisConnectionError, OSError)) for r in results), results
    await client.aclose()


async def test_a_flushed_script_is_reloaded_and_the_call_retried(
    redis_server: RedisServer,
) -> None:
    client = make_client(redis_server.url, timeout=1.0)
    pipe = ScriptPipeline(client)
    admit = Script("admit.lua")
    keys = _keys("flush:", 1)
    assert (await pipe.call(admit, keys, ["r1", 10, 10, 1000, 0]))[0] == 1
    await client.script_flush()
    assert (await pipe.call(admit, keys, ["r2", 10, 10, 1000, 0]))[0] == 1
    await client.aclose()


async def test_the_kept_connection_is_replaced_after_a_redis_restart(
    redis_server: RedisServer,
) -> None:
    """The pipeline keeps one connection; a Redis that restarted in between closed it, and
    the next call must notice before sending (as redis-py's pool would) and succeed."""
    client = make_client(redis_server.url, timeout=1.0)
    pipe = ScriptPipeline(client)
    admit = Script("admit.lua")
    keys = _keys("restart:", 1)
    assert (await pipe.call(admit, keys, ["r1", 10, 10, 1000, 0]))[0] == 1
    redis_server.stop()
    redis_server.start()
    await asyncio.sleep(0.05)  # the loop sees the old connection's end of file
    admit.sha = None  # the restarted Redis has no scripts: loaded again on the way
    assert (await pipe.call(admit, keys, ["r2", 10, 10, 1000, 0]))[0] == 1
    assert pipe.batches == 2
    await pipe.close()
    await client.aclose()


async def test_batches_share_one_connection(redis: aioredis.Redis, key_prefix: str) -> None:
    pipe = ScriptPipeline(redis)
    admit = Script("admit.lua")
    for n in range(5):
        await pipe.call(admit, _keys(key_prefix, n), [f"one-{n}", 10, 10, 1000, 0])
    assert pipe.batches == 5
    assert len(redis.connection_pool._in_use_connections) == 1  # taken once, kept
    await pipe.close()
    assert not redis.connection_pool._in_use_connections  # given back on close


async def test_a_release_whose_waiter_is_cancelled_still_reaches_redis(
    redis: aioredis.Redis, key_prefix: str
) -> None:
    """A client that disconnects cancels the request's wait for its release: the release
    is written all the same (the lease is gone), and the next call is answered."""
    admit, release = Script("admit.lua"), Script("release.lua")
    pipe = ScriptPipeline(redis)
    keys, big = _keys(key_prefix, 7), 1_000_000
    await pipe.call(admit, keys, ["gone", big, big, 60_000, 0])
    waiter = asyncio.ensure_future(pipe.call(release, keys[:1], ["gone"]))
    await asyncio.sleep(0)  # queued, not yet answered
    waiter.cancel()
    assert (await pipe.call(admit, keys, ["next", big, big, 60_000, 0]))[0] == 1
    assert await redis.zscore(keys[0], "gone") is None
    await pipe.close()


async def test_calls_settle_within_their_bound_when_redis_does_not_answer(
    key_prefix: str,
) -> None:
    """A server that takes the connection and never answers: every call, the one on the
    wire and those queued behind it, fails by its own bound (one timer a batch), not by
    the client's longer read timeout."""

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up and closes
        writer.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = make_client(f"redis://127.0.0.1:{port}/0", timeout=5.0)
    pipe = ScriptPipeline(client, bound=0.3)
    admit = Script("admit.lua")
    started = asyncio.get_running_loop().time()
    first = asyncio.ensure_future(pipe.call(admit, _keys(key_prefix, 1), ["a", 1, 1, 1, 0]))
    await asyncio.sleep(0.1)  # the first batch is on the wire; the rest queue behind it
    later = [pipe.call(admit, _keys(key_prefix, n), [f"b{n}", 1, 1, 1, 0]) for n in range(3)]
    results = await asyncio.gather(first, *later, return_exceptions=True)
    elapsed = asyncio.get_running_loop().time() - started
    assert all(isinstance(r, TimeoutError) for r in results), results
    assert elapsed < 1.5  # 0.3 s for the first, 0.3 s after the queued ones were made
    await pipe.close()
    await client.aclose()
    server.close()
    await server.wait_closed()
