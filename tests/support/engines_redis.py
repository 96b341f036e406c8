"""Real Redis engines for the tests, started by the suite itself: a three-master Redis
Cluster and a Sentinel set (one master, one replica, three sentinels), each from
`redis-server` on free loopback ports in a temporary folder, with a password, stopped at
the end. Optionally over TLS, with a throwaway CA (tests/support/tls.py).

    cluster = RedisClusterSet(folder, password="pw"); cluster.start() ... cluster.stop()
    sentinels = RedisSentinelSet(folder, password="pw"); sentinels.start() ...

Without `redis-server` a test skips, except under CI (env CI set), where it fails.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from tests.support.server import free_port

START_SECONDS = 15.0


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    message = "redis-server is not installed (Debian: redis-server)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class Tls:
    """File paths of a throwaway CA and a server certificate for 127.0.0.1."""

    ca: Path
    cert: Path
    key: Path

    def server_args(self, port: int) -> list[str]:
        return ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(self.cert),
                "--tls-key-file", str(self.key), "--tls-ca-cert-file", str(self.ca),
                "--tls-auth-clients", "no"]  # fmt: skip

    def client_kwargs(self) -> dict[str, object]:
        return {"ssl": True, "ssl_ca_certs": str(self.ca)}


@dataclass
class Node:
    """One redis-server process (a data node or a sentinel)."""

    port: int
    folder: Path
    args: list[str]
    password: str | None
    tls: Tls | None = None
    proc: subprocess.Popen[bytes] | None = None
    sentinel: bool = False

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        binary = redis_server_binary()
        port_args = self.tls.server_args(self.port) if self.tls else ["--port", str(self.port)]
        if self.sentinel:
            conf = self.folder / "sentinel.conf"
            if not conf.exists():
                conf.write_text("\n".join(self.args) + "\n")
            argv = [binary, str(conf), "--sentinel", *port_args, "--dir", str(self.folder)]
        else:
            argv = [binary, *port_args, "--bind", "127.0.0.1", "--save", "", "--appendonly",
                    "no", "--dir", str(self.folder), *self.args]  # fmt: skip
        log = open(self.folder / "server.log", "ab")  # noqa: SIM115 (the child keeps it)
        self.proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
        )
        log.close()
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                self.client().ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server on {self.port} did not start") from None
                time.sleep(0.05)

    def client(self) -> redis.Redis:
        extra = self.tls.client_kwargs() if self.tls else {}
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            password=self.password,
            socket_timeout=2,
            decode_responses=True,
            **extra,  # type: ignore[arg-type]
        )

    def kill(self) -> None:
        """SIGKILL: the server vanishes as a crashed machine would."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(5)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
            self.proc = None


def _die_with_parent() -> None:
    """In the child: SIGTERM it when the test process dies, even by SIGKILL (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _auth_args(password: str | None) -> list[str]:
    return ["--requirepass", password, "--masterauth", password] if password else []


def _wait(check: object, what: str, seconds: float = START_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if check():  # type: ignore[operator]
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not reached in {seconds} s")
        time.sleep(0.05)


@dataclass
class RedisClusterSet:
    """Three masters, the 16384 slots split evenly; with `replica`, a fourth node replicates
    the first master (which owns the `{limits}` slot, 2716)."""

    folder: Path
    password: str | None = None
    tls: Tls | None = None
    replica: bool = False
    nodes: list[Node] = field(default_factory=list)

    def url(self, node: int = 0) -> str:
        scheme = "rediss" if self.tls else "redis"
        auth = f":{self.password}@" if self.password else ""
        query = f"?ssl_ca_certs={self.tls.ca}" if self.tls else ""
        return f"{scheme}://{auth}127.0.0.1:{self.nodes[node].port}/0{query}"

    def start(self) -> None:
        tls_args = ["--tls-cluster", "yes"] if self.tls else []
        buses = []
        for i in range(4 if self.replica else 3):
            port = free_port()
            buses.append(free_port())
            args = ["--cluster-enabled", "yes", "--cluster-config-file",
                    str(self.folder / f"node{i}" / "nodes.conf"), "--cluster-node-timeout",
                    "2000", "--cluster-port", str(buses[-1]),
                    "--cluster-replica-validity-factor", "0", *tls_args,
                    *_auth_args(self.password)]  # fmt: skip
            self.nodes.append(Node(port, self.folder / f"node{i}", args, self.password, self.tls))
        for node in self.nodes:
            node.start()
        clients = [node.client() for node in self.nodes]
        bounds = [(0, 5460), (5461, 10922), (10923, 16383)]
        for c, (low, high) in zip(clients, bounds, strict=False):
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)
        for node, bus in zip(self.nodes[1:], buses[1:], strict=True):
            clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, bus)
        for c in clients:
            _wait(lambda c=c: "cluster_state:ok" in c.execute_command("CLUSTER", "INFO"),
                  "cluster state ok")  # fmt: skip
        if self.replica:
            first = self.node_id(0)
            _wait(lambda: first in clients[3].execute_command("CLUSTER", "NODES"), "gossip")
            clients[3].execute_command("CLUSTER", "REPLICATE", first)
            _wait(lambda: clients[0].info("replication")["connected_slaves"] == 1, "replica")
        for c in clients:
            _wait(lambda c=c: len(c.execute_command("CLUSTER", "SLOTS")) == 3, "slots known")
            c.close()

    def node_id(self, node: int) -> str:
        with self.nodes[node].client() as c:
            return str(c.execute_command("CLUSTER", "MYID"))

    def owner_of(self, key: str) -> int:
        """The index of the master that owns `key`'s slot (asked of a node still running)."""
        alive = next(n for n in self.nodes if n.proc is not None)
        owner = self._owner_named_by(alive, key)
        if owner is None:
            raise AssertionError(f"slot of {key} not served")
        return owner

    def owners_of(self, key: str) -> set[int | None]:
        """The master each running node names for `key`'s slot: one index once the cluster
        agrees (after a failover, a node may name the dead master until gossip reaches it)."""
        return {self._owner_named_by(n, key) for n in self.nodes if n.proc is not None}

    def _owner_named_by(self, node: Node, key: str) -> int | None:
        with node.client() as c:
            slot = int(c.execute_command("CLUSTER", "KEYSLOT", key))
            for low, high, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                if low <= slot <= high:
                    port = int(master[1])
                    return next(i for i, n in enumerate(self.nodes) if n.port == port)
        return None

    def migrate_slot(self, key: str, to: int) -> int:
        """Move `key`'s slot, with its keys, to master `to` the way `redis-cli --cluster
        reshard` does (SETSLOT IMPORTING / MIGRATING, MIGRATE, SETSLOT NODE); returns the
        number of keys moved."""
        source = self.owner_of(key)
        src, dst = self.nodes[source].client(), self.nodes[to].client()
        src_id, dst_id = self.node_id(source), self.node_id(to)
        slot = int(src.execute_command("CLUSTER", "KEYSLOT", key))
        masters = [i for i in range(3) if i not in (to, source)]
        moved = 0
        try:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
            for _ in range(1000):
                keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
                if not keys:
                    break
                auth = ["AUTH", self.password] if self.password else []
                src.execute_command("MIGRATE", "127.0.0.1", self.nodes[to].port, "", 0, 5000,
                                    *auth, "KEYS", *keys)  # fmt: skip
                moved += len(keys)
            for node in (to, source, *masters):
                with self.nodes[node].client() as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        finally:
            src.close()
            dst.close()
        return moved

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


@dataclass
class RedisSentinelSet:
    """A master, its replica and three sentinels watching them (quorum 2, 1 s to notice; a
    sentinel that led a failover may lead the next one 2 x 3 s later)."""

    folder: Path
    password: str | None = None
    tls: Tls | None = None
    sentinel_password: str | None = None  # the sentinels' own requirepass
    name: str = "elova"
    data: list[Node] = field(default_factory=list)
    sentinels: list[Node] = field(default_factory=list)

    @property
    def sentinel_setting(self) -> str:
        """ELOVA_REDIS_SENTINELS."""
        return ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)

    def url(self) -> str:
        """ELOVA_REDIS_URL in sentinel mode: no host, the password and scheme only."""
        scheme = "rediss" if self.tls else "redis"
        auth = f":{self.password}@" if self.password else ""
        query = f"?ssl_ca_certs={self.tls.ca}" if self.tls else ""
        return f"{scheme}://{auth}sentinel/0{query}"

    def start(self) -> None:
        tls_args = ["--tls-replication", "yes"] if self.tls else []
        master_port = free_port()
        master = Node(master_port, self.folder / "master", [*tls_args, *_auth_args(self.password)],
                      self.password, self.tls)  # fmt: skip
        replica = Node(free_port(), self.folder / "replica",
                       [*tls_args, *_auth_args(self.password), "--replicaof", "127.0.0.1",
                        str(master_port)], self.password, self.tls)  # fmt: skip
        self.data = [master, replica]
        for node in self.data:
            node.start()
        conf = [f"sentinel monitor {self.name} 127.0.0.1 {master_port} 2",
                f"sentinel down-after-milliseconds {self.name} 1000",
                f"sentinel failover-timeout {self.name} 3000",
                "bind 127.0.0.1"]  # fmt: skip
        if self.password:
            conf.append(f"sentinel auth-pass {self.name} {self.password}")
        if self.sentinel_password:
            conf += [f"requirepass {self.sentinel_password}",
                     f"sentinel sentinel-pass {self.sentinel_password}"]  # fmt: skip
        if self.tls:
            conf += [f"tls-cert-file {self.tls.cert}", f"tls-key-file {self.tls.key}",
                     f"tls-ca-cert-file {self.tls.ca}", "tls-replication yes",
                     "tls-auth-clients no"]  # fmt: skip
        for i in range(3):
            node = Node(free_port(), self.folder / f"sentinel{i}", conf, self.sentinel_password,
                        self.tls)  # fmt: skip
            node.sentinel = True
            self.sentinels.append(node)
            node.start()
        with master.client() as c:
            _wait(lambda: c.info("replication")["connected_slaves"] == 1, "replica attached")
        for s in self.sentinels:
            with s.client() as c:
                _wait(lambda c=c: self._sees_everyone(c), "sentinels know each other")

    def _sees_everyone(self, c: redis.Redis) -> bool:
        state = c.execute_command("SENTINEL", "MASTER", self.name)
        info = dict(zip(state[::2], state[1::2], strict=True)) if isinstance(state, list) else state
        return int(info["num-other-sentinels"]) == 2 and int(info["num-slaves"]) == 1

    def master_port(self) -> int:
        with self.sentinels[0].client() as c:
            _, port = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.name)
            return int(port)

    def master(self) -> Node:
        port = self.master_port()
        return next(n for n in self.data if n.port == port)

    def stop(self) -> None:
        for node in [*self.sentinels, *self.data]:
            node.stop()
