"""Typed application and request keys: the only way to reach shared resources."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    import asyncpg
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster

    from service.auth.caller import Caller
    from service.auth.tokens import TokenService
    from service.config import Config
    from service.limits.admission import Admission
    from service.mcp.catalog import Catalog
    from service.mcp.sessions import SessionStore
    from service.metrics import Metrics
    from service.shedding import Overload
    from service.tools.cursors import CursorCodec

CONFIG: web.AppKey[Config] = web.AppKey("config")
DB_POOL: web.AppKey[asyncpg.Pool] = web.AppKey("db_pool")
# Tool calls' reads of retained records: the read replica's pool, or DB_POOL itself.
DB_READ_POOL: web.AppKey[asyncpg.Pool] = web.AppKey("db_read_pool")
REDIS: web.AppKey[aioredis.Redis | RedisCluster | None] = web.AppKey("redis")
CATALOG: web.AppKey[Catalog] = web.AppKey("catalog")
TOKENS: web.AppKey[TokenService] = web.AppKey("tokens")
CURSORS: web.AppKey[CursorCodec] = web.AppKey("cursors")
ADMISSION: web.AppKey[Admission] = web.AppKey("admission")
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
SESSIONS: web.AppKey[SessionStore] = web.AppKey("sessions")
# Whether this replica is overloaded (event-loop lag, requests in flight): load shedding.
OVERLOAD: web.AppKey[Overload] = web.AppKey("overload")
# The instant a tool call reads as "now" (asOf, period windows). Production: the wall clock;
# tests set it to pin a day (a DST change, a month boundary) end to end over the wire.
CLOCK: web.AppKey[Callable[[], datetime]] = web.AppKey("clock")

# Per request: the authenticated caller, set by the bearer check on /mcp.
CALLER: web.RequestKey[Caller] = web.RequestKey("caller")
REQUEST_ID: web.RequestKey[str] = web.RequestKey("request_id")
