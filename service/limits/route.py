"""Where the admission's script calls go: the one Redis server that serves the limiter's slot.

Every limiter key shares one hash slot (the `{limits}` hash tag, docs/decisions/limits.md),
so at any moment exactly one server runs the scripts: the standalone server, the master the
sentinels name, or the cluster master that owns the slot. A route hands the pipeline its
one kept connection to that server, checked before each batch, and moves it when the
server says the slot lives elsewhere:

- `StandaloneRoute` (standalone and Sentinel): the connection comes from the client's pool.
  A Sentinel-managed connection asks the sentinels for the master each time it connects,
  and turns READONLY (a demoted master) into a lost connection, so after a failover the
  next batch reaches the new master; a task of the app also asks the sentinels every 0.5 s
  (`verify`, watch.py) and drops a connection to a master they no longer name (a
  switchover whose old master is not demoted yet). A MOVED reply here means
  ELOVA_REDIS_MODE is wrong: it is not followed (logged once) and counts as a failure.
- `ClusterRoute`: the connection comes from the node that owns the slot in the cluster
  client's slot map. MOVED refreshes the map and moves the kept connection; a lost
  connection (a node died, a failover) refreshes the map before the next batch; ASK lends
  a connection to the importing node for the calls that were redirected.
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
    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._conn: AbstractConnection | None = None
        self._warned = False
        self.sentinel = isinstance(client.connection_pool, SentinelConnectionPool)

    async def connection(self) -> AbstractConnection:
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
    def __init__(self, client: RedisCluster, key: str) -> None:
        self._client = client
        self._key = key  # any limiter key: they all hash to the limiter's slot
        self._node: ClusterNode | None = None
        self._conn: AbstractConnection | None = None
        self._refresh = False  # the slot map may be stale: ask the cluster again first
        self.moves = 0  # times the kept connection moved to another node (tests read it)
        self.sentinel = False

    @property
    def node_name(self) -> str | None:
        return None if self._node is None else self._node.name

    async def connection(self) -> AbstractConnection:
        try:
            return await self._connection()
        except BaseException:
            self._refresh = True  # the owner may be gone (a failover): read the map again
            raise

    async def _connection(self) -> AbstractConnection:
        if self._conn is not None and not self._refresh:
            return await checked(self._conn)
        try:
            if self._refresh:
                await self._client.nodes_manager.initialize()
            else:
                await self._client.initialize()  # the first time only: a no-op after
            node = self._client.get_node_from_key(self._key)
        except RedisClusterException as err:  # no node answered, or the slot is unserved
            raise RedisConnectionError(f"Redis Cluster: {err}") from err
        self._refresh = False
        if node is None:
            raise RedisConnectionError("Redis Cluster: no node serves the limiter's slot")
        self._take(node)
        assert self._conn is not None
        return await checked(self._conn)

    async def verify(self) -> None:
        """Nothing to do: a master that lost the slot answers MOVED."""

    async def lost(self, conn: AbstractConnection) -> None:
        await conn.disconnect()
        if conn is self._conn:
            self._refresh = True  # the node may be gone: look the slot up again

    async def moved(self, err: MovedError) -> bool:
        """The slot lives elsewhere now: refresh the slot map and move the kept connection
        (to the node MOVED named when the refreshed map knows it, else the map's owner)."""
        await self._read_slot_map()
        node = self._client.get_node(host=err.host, port=err.port)
        if node is None:
            node = self._client.get_node_from_key(self._key)
        if node is None:
            raise RedisConnectionError("Redis Cluster: no node serves the limiter's slot")
        self._take(node)
        return True

    async def asking(self, err: AskError) -> tuple[AbstractConnection, object] | None:
        """A connection to the importing node named by ASK, lent for one exchange."""
        node = self._client.get_node(host=err.host, port=err.port)
        if node is None:
            await self._read_slot_map()
            node = self._client.get_node(host=err.host, port=err.port)
            if node is None:
                raise RedisConnectionError(f"ASK names an unknown node {err.host}:{err.port}")
        return await checked(node.acquire_connection()), node

    async def _read_slot_map(self) -> None:
        """Ask the cluster for its slot map again; no node answering is a connection error
        (what the pipeline and the breaker treat as Redis being unavailable)."""
        try:
            await self._client.nodes_manager.initialize()
        except RedisClusterException as failed:
            raise RedisConnectionError(f"Redis Cluster: {failed}") from failed

    def lend_back(self, lent: object, conn: AbstractConnection) -> None:
        assert isinstance(lent, ClusterNode) and isinstance(conn, Connection)
        lent.release(conn)

    def _take(self, node: ClusterNode) -> None:
        if self._node is node and self._conn is not None:
            return
        self._give_back()
        if self._node is not None:
            self.moves += 1
        self._node = node
        self._conn = node.acquire_connection()

    def _give_back(self) -> None:
        if self._node is not None and isinstance(self._conn, Connection):
            self._node.release(self._conn)
        self._conn = None

    async def close(self) -> None:
        self._give_back()


Route = StandaloneRoute | ClusterRoute


def route_for(client: aioredis.Redis | RedisCluster, key: str) -> Route:
    if isinstance(client, RedisCluster):
        return ClusterRoute(client, key)
    return StandaloneRoute(client)
