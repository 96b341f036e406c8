"""An ID-JAG's jti is used once across replicas: two Redis clients (two replicas) see one
mark; a Redis that does not answer refuses (503), never accepts; without Redis settings the
marks are one process's."""

from __future__ import annotations

import hashlib
import uuid

import pytest
import redis.asyncio as aioredis

from service.auth.enterprise.replay import first_use
from service.errors import OAuthError
from tests.support.services import REDIS_URL


async def test_the_first_replica_wins(redis_prefix: str) -> None:
    one, two = aioredis.from_url(REDIS_URL), aioredis.from_url(REDIS_URL)
    jti = uuid.uuid4().hex
    try:
        assert await first_use(one, redis_prefix, "https://idp.example", jti, 30) is True
        assert await first_use(two, redis_prefix, "https://idp.example", jti, 30) is False
        # the same jti from another issuer is another assertion
        assert await first_use(two, redis_prefix, "https://other.example", jti, 30) is True
        digest = hashlib.sha256(f"https://idp.example\n{jti}".encode()).hexdigest()
        assert 0 < await one.ttl(f"{redis_prefix}idjag:{digest}") <= 31  # until it expires
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_silent_redis_refuses_with_503(redis_prefix: str) -> None:
    down = aioredis.from_url("redis://127.0.0.1:1", socket_connect_timeout=0.5)
    try:
        with pytest.raises(OAuthError) as refused:
            await first_use(down, redis_prefix, "https://idp.example", uuid.uuid4().hex, 30)
    finally:
        await down.aclose()
    assert (refused.value.error, refused.value.status) == ("temporarily_unavailable", 503)


async def test_without_redis_the_process_remembers() -> None:
    jti = uuid.uuid4().hex
    assert await first_use(None, "", "https://idp.example", jti, 30) is True
    assert await first_use(None, "", "https://idp.example", jti, 30) is False
