"""Where the admission's script calls go: the Redis server that serves each call's slot.

The keys of one admission share its account's hash slot: the standalone server or the
master the sentinels name serves every slot; in a Cluster, the master that owns the
account's slot. A route (`StandaloneRoute`, `ClusterRoute`) hands the pipeline a kept
connection to each such server (one per master), checked before each batch, and follows
the server when it says a slot lives elsewhere. Why: docs/decisions/limits.md, "One slot
per account", and "Redis engines (issue 12)" for failover, MOVED and ASK.
"""

from __future__ import annotations

import logging

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection, Connection
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import (
    AskError,
    MovedError,
    RedisClusterException,
    RedisError,
)
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)

log = logging.getLogger("service.limits")


async def checked(conn: AbstractConnection) -> AbstractConnection:
    """The connection, checked as redis-py's pool checks one it hands out: connected, and
    holding no unread data (a server that closed it reads as end of file)."""
    if _clean(conn):  # the usual case, checked without redis-py's connect machinery
        return conn
    await conn.connect()  # type: ignore[no-untyped-call]  # a no-op while connected
    try:
        stale = await conn.can_read()
    except (RedisError, OSError):  # closed under it: redis-py's ConnectionError
        stale = True
    if stale:
        await conn.disconnect()
        await conn.connect()  # type: ignore[no-untyped-call]
    return conn


def _clean(conn: AbstractConnection) -> bool:
    """Connected, and nothing unread (what `can_read` tells, for the hiredis parser)."""
    parser = conn._parser
    reader = getattr(parser, "_reader", None)
    stream = getattr(parser, "_stream", None)
    return (
        conn.is_connected
        and isinstance(reader, hiredis.Reader)
        and stream is not None
        and not reader.has_data()
        and not stream.at_eof()
        and not stream._buffer
    )


class StandaloneRoute:
    """Standalone and Sentinel: one server serves every slot, its connection taken from the
    client's pool.

    A Sentinel-managed connection asks the sentinels for the master each time it connects,
    and turns READONLY (a demoted master) into a lost connection, so after a failover the
    next batch reaches the new master; a task of the app also asks the sentinels every 0.5 s
    (`verify`, limiter_health.py) and drops a connection to a master they no longer name (a
    switchover whose old master is not demoted yet). A MOVED reply here means
    ELOVA_REDIS_MODE is wrong: it is not followed (logged once) and counts as a failure.
    """

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._conn: AbstractConnection | None = None
        self._warned = False
        self.sentinel = isinstance(client.connection_pool, SentinelConnectionPool)
        self.one_server = True  # every slot: a batch is never split

    async def ready(self) -> None:
        """Nothing to read: one server serves every slot."""

    def owner(self, slot: int) -> str | None:
        return None

    async def connections(self) -> list[AbstractConnection]:
        return [await self.connection()]

    async def connection(self, slot: int = 0) -> AbstractConnection:
        conn = self._conn
        if conn is None:
            pool = self._client.connection_pool
            taken: AbstractConnection = await pool.get_connection()  # type: ignore[no-untyped-call]
            self._conn = taken
            return taken
        return await checked(conn)

    @property
    def address(self) -> tuple[str, int] | None:
        """Where the kept connection points (None before the first batch)."""
        conn = self._conn
        if conn is None:
            return None
        host, port = getattr(conn, "host", None), getattr(conn, "port", None)
        return None if host is None or port is None else (str(host), int(port))

    async def verify(self) -> None:
        """Sentinel mode: ask the sentinels which server is the master now, and drop the
        kept connection if it points elsewhere. Without this a switchover is noticed only
        once the old master is demoted (its READONLY or its closed connection): until then
        it still takes writes that the new master will never see."""
        pool = self._client.connection_pool
        if not isinstance(pool, SentinelConnectionPool):
            return
        master = await pool.get_master_address()  # type: ignore[no-untyped-call]
        address = self.address
        if address is not None and self._conn is not None and address != tuple(master):
            log.warning("the sentinels name another master: the limiter reconnects")
            await self._conn.disconnect()

    async def lost(self, conn: AbstractConnection) -> None:
        """Replies may be left unread: the next batch starts on a fresh connection."""
        await conn.disconnect()

    async def moved(self, err: MovedError) -> bool:
        """Whether the redirect was followed (never, outside cluster mode)."""
        if not self._warned:
            self._warned = True
            log.warning("Redis answered MOVED: it is a cluster node; set ELOVA_REDIS_MODE=cluster")
        return False

    async def asking(self, err: AskError) -> tuple[AbstractConnection, object] | None:
        return None

    def lend_back(self, lent: object, conn: AbstractConnection) -> None:
        pass

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._client.connection_pool.release(conn)


class ClusterRoute:
    """A Cluster: one kept connection per master, taken from the node.

    A call goes to the master that owns its slot in the cluster client's slot map. MOVED
    reads the map again and the calls are sent to their owners anew; a lost connection (a
    node died, a failover) reads the map before the next batch; ASK lends a connection to
    the importing node for the calls that were redirected.
    """

    def __init__(self, client: RedisCluster) -> None:
        self._client = client
        self._conns: dict[str, tuple[ClusterNode, AbstractConnection]] = {}  # by node name
        self._ready = False  # the slot map was read at least once
        self._refresh = False  # the slot map may be stale: ask the cluster again first
        self.moves = 0  # MOVED replies that made the route read the slot map (tests read it)
        self.sentinel = False
        self.one_server = False

    async def ready(self) -> None:
        """Read the slot map the first time, and again after a lost connection or a MOVED
        (a failover, a migrated slot); no node answering is a connection error."""
        if self._ready and not self._refresh:
            return
        try:
            if self._ready:
                await self._client.nodes_manager.initialize()
            else:
                await self._client.initialize()
        except RedisClusterException as err:  # no node answered
            raise RedisConnectionError(f"Redis Cluster: {err}") from err
        self._ready, self._refresh = True, False

    def owner(self, slot: int) -> str | None:
        """The name of the master that serves `slot` in the slot map (None: unserved)."""
        nodes = self._client.nodes_manager.slots_cache.get(slot)
        return nodes[0].name if nodes else None

    async def connection(self, slot: int = 0) -> AbstractConnection:
        """The kept connection to the master that serves `slot` (one per master)."""
        try:
            await self.ready()
            nodes = self._client.nodes_manager.slots_cache.get(slot)
            if not nodes:
                raise RedisConnectionError(f"Redis Cluster: no node serves slot {slot}")
            return await checked(self._kept(nodes[0]))
        except BaseException:
            self._refresh = True  # the owner may be gone (a failover): read the map again
            raise

    async def connections(self) -> list[AbstractConnection]:
        """A kept connection to every master (to load the scripts on each)."""
        await self.ready()
        return [await checked(self._kept(node)) for node in self._client.get_primaries()]

    def _kept(self, node: ClusterNode) -> AbstractConnection:
        kept = self._conns.get(node.name)
        if kept is not None and kept[0] is node:
            return kept[1]
        if kept is not None:
            self._give_back(node.name)
        conn = node.acquire_connection()
        self._conns[node.name] = (node, conn)
        return conn

    async def verify(self) -> None:
        """Nothing to do: a master that lost a slot answers MOVED."""

    async def lost(self, conn: AbstractConnection) -> None:
        await conn.disconnect()
        for name, (_, kept) in list(self._conns.items()):
            if kept is conn:
                self._give_back(name)
        self._refresh = True  # the node may be gone: look the slots up again

    async def moved(self, err: MovedError) -> bool:
        """A slot lives elsewhere now: read the slot map again before the calls are sent to
        their owners anew."""
        self.moves += 1
        self._refresh = True
        await self.ready()
        return True

    async def asking(self, err: AskError) -> tuple[AbstractConnection, object] | None:
        """A connection to the importing node named by ASK, lent for one exchange."""
        node = self._client.get_node(host=err.host, port=err.port)
        if node is None:
            self._refresh = True
            await self.ready()
            node = self._client.get_node(host=err.host, port=err.port)
            if node is None:
                raise RedisConnectionError(f"ASK names an unknown node {err.host}:{err.port}")
        return await checked(node.acquire_connection()), node

    def lend_back(self, lent: object, conn: AbstractConnection) -> None:
        assert isinstance(lent, ClusterNode) and isinstance(conn, Connection)
        lent.release(conn)

    def _give_back(self, name: str) -> None:
        node, conn = self._conns.pop(name)
        if isinstance(conn, Connection):
            node.release(conn)

    async def close(self) -> None:
        for name in list(self._conns):
            self._give_back(name)


Route = StandaloneRoute | ClusterRoute


def route_for(client: aioredis.Redis | RedisCluster) -> Route:
    if isinstance(client, RedisCluster):
        return ClusterRoute(client)
    return StandaloneRoute(client)
