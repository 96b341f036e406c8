"""Typed application and request keys: the only way to reach shared resources."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    import asyncpg
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster

    from service.audit.writer import AuditWriter
    from service.auth.activity_counts import ActivityRecorder
    from service.auth.authorization import ApprovalReads
    from service.auth.caller import Caller
    from service.auth.clients.metadata_documents import MetadataClients
    from service.auth.enterprise.jwks import JwksCache
    from service.auth.tokens import TokenService
    from service.config import Config
    from service.limits.admission import Admission
    from service.limits.registrations import RegistrationLimit
    from service.mcp.catalog import Catalog
    from service.mcp.sessions import SessionStore
    from service.observability.metrics.app_metrics import Metrics
    from service.server.health import DrainState
    from service.server.overload.state import Overload
    from service.tools.cursors import CursorCodec

CONFIG: web.AppKey[Config] = web.AppKey("config")
DB_POOL: web.AppKey[asyncpg.Pool] = web.AppKey("db_pool")
# Tool calls' reads of retained records: the read replica's pool, or DB_POOL itself.
DB_READ_POOL: web.AppKey[asyncpg.Pool] = web.AppKey("db_read_pool")
REDIS: web.AppKey[aioredis.Redis | RedisCluster | None] = web.AppKey("redis")
CATALOG: web.AppKey[Catalog] = web.AppKey("catalog")
TOKENS: web.AppKey[TokenService] = web.AppKey("tokens")
# The authorization step's reads of approval states (service/auth/authorization.py).
APPROVAL_READS: web.AppKey[ApprovalReads] = web.AppKey("approval_reads")
CURSORS: web.AppKey[CursorCodec] = web.AppKey("cursors")
ADMISSION: web.AppKey[Admission] = web.AppKey("admission")
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
AUDIT: web.AppKey[AuditWriter] = web.AppKey("audit")
SESSIONS: web.AppKey[SessionStore] = web.AppKey("sessions")
# Whether this replica is overloaded (event-loop lag, requests in flight): load shedding.
OVERLOAD: web.AppKey[Overload] = web.AppKey("overload")
# The instant a tool call reads as "now" (asOf, period windows). Production: the wall clock;
# tests set it to pin a day (a DST change, a month boundary) end to end over the wire.
CLOCK: web.AppKey[Callable[[], datetime]] = web.AppKey("clock")
# Whether this process is shutting down (/readyz then fails).
DRAIN: web.AppKey[DrainState] = web.AppKey("drain")
# The health probes by path, each answering from the app it is given: the main listener
# serves them, and the metrics listener too, where client traffic cannot crowd them out.
PROBES: web.AppKey[Mapping[str, Callable[[web.Application], Awaitable[web.Response]]]] = web.AppKey(
    "probes"
)
# Tool calls per approval, counted in process until the next flush.
ACTIVITY: web.AppKey[ActivityRecorder] = web.AppKey("approval_activity")
# Client ID Metadata Documents: the per-process cache of accepted (and refused) ones, and
# the fetch session.
METADATA_CLIENTS: web.AppKey[MetadataClients] = web.AppKey("metadata_clients")
# The trusted IdPs' key sets (auth/enterprise/jwks.py).
IDP_JWKS: web.AppKey[JwksCache] = web.AppKey("idp_jwks")
# Dynamic registrations per client address (service/limits/registrations.py).
REGISTRATION_LIMIT: web.AppKey[RegistrationLimit] = web.AppKey("registration_limit")
# The pages' stylesheet (auth/pages/templates/elova.css), read once at start.
OAUTH_STYLESHEET: web.AppKey[bytes] = web.AppKey("oauth_stylesheet")

# Per request: the authenticated caller, set by the bearer check on /mcp.
CALLER: web.RequestKey[Caller] = web.RequestKey("caller")
REQUEST_ID: web.RequestKey[str] = web.RequestKey("request_id")
# Per request: what its answer is about for refusal pacing (service/server/connections.py), an
# opaque value: the approval a verified token names, or the hash of a refused token.
PACING_KEY: web.RequestKey[object] = web.RequestKey("pacing_key")
# Per request: the client's address read behind a trusted proxy (service/edge/client_address.py),
# worked out once.
CLIENT_ADDRESS: web.RequestKey[str] = web.RequestKey("client_address")
