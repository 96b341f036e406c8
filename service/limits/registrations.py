"""The registration limit: how many clients one address may register, shared by replicas.

`RegistrationLimit` keeps a token bucket per client address (`address_key`): in Redis when
it is there (registrations.lua), else per replica with its share. A refusal says when the
next token comes: the 429's `Retry-After`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

from aiohttp import web
from redis.exceptions import RedisError

from service.app_keys import CONFIG, REDIS, REGISTRATION_LIMIT
from service.edge.client_address import address_block
from service.limits.breaker import CircuitBreaker, State
from service.limits.redis_client import RedisClient
from service.settings.oauth import Registration

log = logging.getLogger(__name__)

MAX_LOCAL_BUCKETS = 10_000
_SCRIPT = resources.files(__package__).joinpath("registrations.lua").read_text("utf-8")


def address_key(address: str) -> str:
    """What the limit counts by: the IPv4 address, or the /64 of an IPv6 one."""
    return address_block(address)


class RegistrationLimit:
    """A token bucket per client address (service/edge/client_address.py; an IPv6 address
    counts as its /64, which one host usually holds whole): `burst` registrations at once,
    refilled at `per_hour` (ELOVA_OAUTH_REGISTER_BURST, ELOVA_OAUTH_REGISTER_PER_HOUR).

    With Redis the bucket lives there (registrations.lua, one key, Redis time), so every
    replica takes from the same one. Without Redis, or while it fails (a circuit breaker like
    the admission's: after 3 failures in a row Redis is left alone for a second), each
    replica keeps buckets of its own with its share of both numbers (divided by
    ELOVA_EXPECTED_REPLICAS, at least 1), so the replicas together stay near the configured
    limit.
    """

    def __init__(
        self,
        settings: Registration,
        *,
        redis: RedisClient | None,
        key_prefix: str,
        replicas: int,
        timeout_seconds: float,
    ) -> None:
        self.burst = settings.burst
        self.per_hour = settings.per_hour
        self._prefix = f"{key_prefix}register:"
        self._timeout = timeout_seconds * 3
        self._script: Any = redis.register_script(_SCRIPT) if redis is not None else None
        self._breaker = CircuitBreaker()
        self._local_burst = max(1, settings.burst // replicas)
        self._local_rate = max(settings.per_hour / replicas, 1.0) / 3600.0
        self._local: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self.shared_down = False

    async def take(self, address: str) -> int | None:
        """Take one registration for `address`: None when taken, else the whole seconds
        until the next one (what Retry-After says)."""
        key = address_key(address)
        if self._script is not None and self._breaker.allow():
            retry_ms = await self._take_shared(key)
            if retry_ms is not None:
                return None if retry_ms == 0 else max(1, math.ceil(retry_ms / 1000))
        return self._take_local(key)

    async def _take_shared(self, key: str) -> int | None:
        """The script's answer (0: taken, else ms to wait); None when Redis failed."""
        try:
            async with asyncio.timeout(self._timeout):
                taken, retry_ms = await self._script(
                    keys=[self._prefix + key], args=[self.burst, self.per_hour]
                )
        except asyncio.CancelledError:
            self._breaker.abandon()  # the client went away: no answer either way
            raise
        except (RedisError, OSError, TimeoutError) as err:
            self._breaker.record_failure()
            if not self.shared_down:
                self.shared_down = True
                log.warning(
                    "registration limit: Redis failed (%s); per-replica buckets apply",
                    type(err).__name__,
                )
            return None
        self._breaker.record_success()
        if self.shared_down:
            self.shared_down = False
            log.warning("registration limit: Redis answers again; shared buckets apply")
        return 0 if int(taken) == 1 else max(1, int(retry_ms))

    def _take_local(self, key: str) -> int | None:
        now = time.monotonic()
        tokens, at = self._local.pop(key, (float(self._local_burst), now))
        tokens = min(float(self._local_burst), tokens + (now - at) * self._local_rate)
        if tokens < 1:
            self._remember(key, tokens, now)
            return max(1, math.ceil((1 - tokens) / self._local_rate))
        self._remember(key, tokens - 1, now)
        return None

    def _remember(self, key: str, tokens: float, now: float) -> None:
        self._local[key] = (tokens, now)
        while len(self._local) > MAX_LOCAL_BUCKETS:
            self._local.popitem(last=False)  # the least recently used address

    @property
    def breaker_state(self) -> State:
        return self._breaker.state


async def registration_limit_ctx(app: web.Application) -> AsyncIterator[None]:
    """app[REGISTRATION_LIMIT], on the app's Redis client (registered after redis_ctx)."""
    cfg = app[CONFIG]
    app[REGISTRATION_LIMIT] = RegistrationLimit(
        cfg.registration,
        redis=app.get(REDIS),
        key_prefix=cfg.redis_key_prefix,
        replicas=cfg.limits.expected_replicas,
        timeout_seconds=cfg.limits.redis_timeout_seconds,
    )
    yield
