"""Service configuration: one frozen object parsed once from an injected mapping.

Every setting is an ``ELOVA_*`` environment variable. ``Config.from_env`` takes any
``Mapping[str, str]`` so tests pass a dict instead of patching ``os.environ``. A missing
or malformed value raises ``ConfigError`` naming the variable, and the start stops there.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import urlsplit

from service.database_urls import database_url, primary_database_url
from service.errors import ConfigError
from service.tracing import configured as tracing_configured

T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """Request and rate limits (docs/limits.md); defaults are the specification's."""

    global_concurrency: int = 4
    account_concurrency: int = 2
    approval_per_minute: int = 60
    account_per_day: int | None = None
    request_deadline_seconds: float = 30.0
    max_body_bytes: int = 32 * 1024
    max_response_bytes: int = 256 * 1024
    lease_grace_seconds: float = 5.0
    expected_replicas: int = 1
    # Redis is asked on every request: a call either answers within this timeout or fails,
    # and after `breaker_failures` failures in a row the per-process limiter takes over for
    # `breaker_cooldown_seconds` before Redis is tried again.
    redis_timeout_seconds: float = 0.25
    breaker_failures: int = 3
    breaker_cooldown_seconds: float = 1.0


# Overload and slow clients (docs/decisions/floods.md) ------------------------------------


@dataclass(frozen=True)
class Shedding:
    """When this replica refuses new requests at once (503 + Retry-After, service/shedding.py):
    event-loop lag at `loop_lag_seconds` (0: never for lag), or `max_inflight` requests already
    in flight on the shed routes (by default twice the PostgreSQL pool)."""

    loop_lag_seconds: float = 0.05
    max_inflight: int = 20


@dataclass(frozen=True)
class Connections:
    """The main listener's guards against slow and idle clients (service/connections.py)."""

    max_connections: int = 1000
    header_timeout_seconds: float = 10.0  # first byte of a request head → the whole head
    body_timeout_seconds: float = 10.0  # the whole head → the whole body
    # An idle keep-alive connection is closed after this long; longer than the idle timeout
    # of the load balancer in front, so the balancer, not the service, ends idle connections.
    keepalive_timeout_seconds: float = 75.0
    # Refusal pacing: past this many refusals in a row on one connection (0: never), each
    # further refusal's answer waits, from 10 ms doubling up to the longest pause.
    pace_refusals_after: int = 10
    longest_refusal_pause_seconds: float = 1.0


# Client registration (docs/decisions/oauth.md, "Registration bounds") -------------------


@dataclass(frozen=True)
class Registration:
    """Dynamic registration's limit per client address (a token bucket: `burst` at once,
    refilled at `per_hour`), and how long a client that never completed an authorization
    is kept (`unused_retention_hours`; swept every `sweep_seconds` by each replica)."""

    burst: int = 10
    per_hour: int = 30
    unused_retention_hours: int = 168
    sweep_seconds: float = 600.0


def _registration(env: Mapping[str, str]) -> Registration:
    return Registration(
        burst=_parse(env, "ELOVA_OAUTH_REGISTER_BURST", _positive_int, 10),
        per_hour=_parse(env, "ELOVA_OAUTH_REGISTER_PER_HOUR", _positive_int, 30),
        unused_retention_hours=_parse(
            env, "ELOVA_OAUTH_UNUSED_CLIENT_RETENTION_HOURS", _positive_int, 168
        ),
        sweep_seconds=_parse(env, "ELOVA_OAUTH_CLIENT_SWEEP_SECONDS", _positive_float, 600.0),
    )


# Client addresses and the sign-in throttle (docs/decisions/oauth.md) --------------------

ProxyNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
FORWARDING_HEADERS = ("x-forwarded-for", "forwarded")


@dataclass(frozen=True)
class TrustedProxies:
    """Which peers may say who the client is (service/client_address.py): the networks of
    ELOVA_TRUSTED_PROXIES (none: the connection's peer is the client) and the one header
    they write, ELOVA_TRUSTED_PROXY_HEADER (the other is never read)."""

    networks: tuple[ProxyNetwork, ...] = ()
    header: str = "x-forwarded-for"
    # What service/client_address.py worked out, remembered (it is asked on every request):
    # a peer's canonical address and whether it is trusted; a header entry's, likewise.
    peers: dict[str, tuple[str, bool]] = field(default_factory=dict, compare=False, repr=False)
    entries: dict[str, tuple[str | None, bool]] = field(
        default_factory=dict, compare=False, repr=False
    )


@dataclass(frozen=True)
class SigninThrottle:
    """Failed sign-ins (service/auth/oauth/throttle.py). An (account, address) pair may fail
    `free_failures` times; each further failure makes its next attempt wait, from
    `first_delay_seconds` doubling up to `longest_delay_seconds`. An account is held for
    everyone but its known addresses once failures within `window_seconds` come from
    `account_addresses` distinct addresses; an address, for every account, after
    `address_failures` failures within the window."""

    free_failures: int = 3
    first_delay_seconds: float = 2.0
    longest_delay_seconds: float = 900.0
    window_seconds: float = 900.0
    account_addresses: int = 10
    address_failures: int = 30


def _trusted_proxies(env: Mapping[str, str]) -> TrustedProxies:
    no_networks: tuple[ProxyNetwork, ...] = ()
    networks = _parse(env, "ELOVA_TRUSTED_PROXIES", _networks, no_networks)
    header = _parse(env, "ELOVA_TRUSTED_PROXY_HEADER", _forwarding_header, "x-forwarded-for")
    return TrustedProxies(networks, header)


def _networks(raw: str) -> tuple[ProxyNetwork, ...]:
    out = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        try:
            out.append(ipaddress.ip_network(item, strict=True))
        except ValueError as err:
            raise ValueError(
                f"expected CIDRs such as 10.0.0.0/8,fd00::/8 (no host bits set), got {item!r}"
            ) from err
    return tuple(out)


def _forwarding_header(raw: str) -> str:
    if raw.lower() not in FORWARDING_HEADERS:
        raise ValueError("expected x-forwarded-for or forwarded")
    return raw.lower()


def _signin_throttle(env: Mapping[str, str]) -> SigninThrottle:
    settings = SigninThrottle(
        free_failures=_parse(env, "ELOVA_SIGNIN_FREE_FAILURES", _positive_int, 3),
        first_delay_seconds=_parse(env, "ELOVA_SIGNIN_FIRST_DELAY_SECONDS", _positive_float, 2.0),
        longest_delay_seconds=_parse(
            env, "ELOVA_SIGNIN_LONGEST_DELAY_SECONDS", _positive_float, 900.0
        ),
        window_seconds=_parse(env, "ELOVA_SIGNIN_WINDOW_SECONDS", _positive_float, 900.0),
        account_addresses=_parse(env, "ELOVA_SIGNIN_ACCOUNT_ADDRESSES", _positive_int, 10),
        address_failures=_parse(env, "ELOVA_SIGNIN_ADDRESS_FAILURES", _positive_int, 30),
    )
    if settings.longest_delay_seconds < settings.first_delay_seconds:
        raise ConfigError(
            "ELOVA_SIGNIN_LONGEST_DELAY_SECONDS is shorter than ELOVA_SIGNIN_FIRST_DELAY_SECONDS"
        )
    return settings


# The audit trail (service/audit/, docs/operations.md "Audit trail") -------------------

AUDIT_SINK_KINDS = ("stdout", "file", "unix", "tcp")


@dataclass(frozen=True)
class Audit:
    """Where audit lines go and how long a request may wait for room in the queue.

    `sink`: "stdout" (beside the request log), "file" (`target` a path, appended), "unix"
    (`target` a socket path) or "tcp" (`target` host, `port`), from ELOVA_AUDIT_SINK
    (`stdout`, `file:/path`, `unix:/path`, `tcp:host:port`). `queue_lines` bound the
    in-memory queue; a request whose line finds it full waits up to `wait_seconds`, then is
    refused 503 (back-pressure: a line is never dropped)."""

    sink: str = "stdout"
    target: str = ""
    port: int = 0
    queue_lines: int = 10_000
    wait_seconds: float = 2.0


def _audit(env: Mapping[str, str]) -> Audit:
    sink, target, port = _parse(env, "ELOVA_AUDIT_SINK", _audit_sink, ("stdout", "", 0))
    return Audit(
        sink=sink,
        target=target,
        port=port,
        queue_lines=_parse(env, "ELOVA_AUDIT_QUEUE_LINES", _positive_int, 10_000),
        wait_seconds=_parse(env, "ELOVA_AUDIT_WAIT_SECONDS", _positive_float, 2.0),
    )


def _audit_sink(raw: str) -> tuple[str, str, int]:
    kind, _, rest = raw.partition(":")
    if kind == "stdout" and not rest:
        return "stdout", "", 0
    if kind in ("file", "unix") and rest.startswith("/"):
        return kind, rest, 0
    if kind == "tcp":
        host, _, port = rest.rpartition(":")
        if host and port.isdigit() and 0 < int(port) < 65536:
            return "tcp", host.strip("[]"), int(port)
    raise ValueError(
        f"expected stdout, file:/absolute/path, unix:/absolute/path or tcp:host:port, got {raw!r}"
    )


# Redis engines (issue 12) ---------------------------------------------------------------

REDIS_MODES = ("standalone", "cluster", "sentinel")


@dataclass(frozen=True)
class RedisEngine:
    """Which Redis the limiter talks to: ELOVA_REDIS_MODE and, for Sentinel, where the
    sentinels are and which master they guard. In sentinel mode ELOVA_REDIS_URL is optional
    and only its credentials, database number, scheme (rediss = TLS) and query options apply
    (to the master and, for the scheme and TLS options, to the sentinels, which take their
    own password from ELOVA_REDIS_SENTINEL_PASSWORD)."""

    mode: str = "standalone"
    sentinels: tuple[tuple[str, int], ...] = ()
    sentinel_master: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)  # the sentinels' own


def _redis_engine(env: Mapping[str, str]) -> RedisEngine:
    mode = _parse(env, "ELOVA_REDIS_MODE", _redis_mode, "standalone")
    no_sentinels: tuple[tuple[str, int], ...] = ()
    sentinels = _parse(env, "ELOVA_REDIS_SENTINELS", _sentinels, no_sentinels)
    master = _str(env, "ELOVA_REDIS_SENTINEL_MASTER", "") or None
    sentinel_password = _raw(env, "ELOVA_REDIS_SENTINEL_PASSWORD") or None
    url = _raw(env, "ELOVA_REDIS_URL")
    if mode == "sentinel":
        if not sentinels:
            raise ConfigError("ELOVA_REDIS_SENTINELS is required when ELOVA_REDIS_MODE=sentinel")
        if master is None:
            raise ConfigError(
                "ELOVA_REDIS_SENTINEL_MASTER is required when ELOVA_REDIS_MODE=sentinel"
            )
    else:
        for name, value in (
            ("ELOVA_REDIS_SENTINELS", sentinels),
            ("ELOVA_REDIS_SENTINEL_MASTER", master),
            ("ELOVA_REDIS_SENTINEL_PASSWORD", sentinel_password),
        ):
            if value:
                raise ConfigError(f"{name} is set but ELOVA_REDIS_MODE is {mode}, not sentinel")
    if mode == "cluster" and not url:
        raise ConfigError("ELOVA_REDIS_URL is required when ELOVA_REDIS_MODE=cluster (any node)")
    if mode == "cluster" and urlsplit(url).path.strip("/") not in ("", "0"):
        raise ConfigError("ELOVA_REDIS_URL: a Redis Cluster has database 0 only")
    if mode != "standalone" and urlsplit(url).scheme == "unix":
        raise ConfigError(f"ELOVA_REDIS_URL: a unix:// socket cannot be used in {mode} mode")
    return RedisEngine(mode, sentinels, master, sentinel_password)


def _redis_mode(raw: str) -> str:
    if raw not in REDIS_MODES:
        raise ValueError(f"expected standalone, cluster or sentinel, got {raw!r}")
    return raw


def _sentinels(raw: str) -> tuple[tuple[str, int], ...]:
    out = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        host, sep, port = item.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"expected host:port[,host:port…], got {item!r}")
        out.append((host, int(port)))
    return tuple(out)


def _key_prefix(raw: str) -> str:
    # Redis hashes the first non-empty {…} of a key. An empty {} in the prefix would make
    # every limiter key hash as a whole: the keys of one admission would land in different
    # cluster slots (CROSSSLOT) and the script could not run. A non-empty {tag} is allowed:
    # it replaces the {limits} tag, and every limiter key still shares one slot.
    if "{}" in raw:
        raise ValueError("an empty {} would split the limiter's keys across cluster slots")
    return raw


# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    database_url: str
    redis_url: str | None = None
    redis_key_prefix: str = "elova:"
    host: str = "127.0.0.1"
    port: int = 8080
    public_url: str = "http://127.0.0.1:8080"
    signing_key_pem: bytes = b""
    previous_signing_keys_pem: tuple[bytes, ...] = ()
    metrics_port: int | None = None
    allowed_origins: tuple[str, ...] = ()
    db_pool_min: int = 2
    db_pool_max: int = 10
    log_level: str = "INFO"
    access_token_ttl_seconds: int = 300
    drain_seconds: float = 5.0  # after SIGTERM: readiness fails, the listener serves on this long
    # Client ID Metadata Documents (service/auth/oauth/cimd.py): fetching private, loopback
    # and link-local addresses (and http on loopback) only for tests and private deployments;
    # a fetched document is reused for at most this long.
    oauth_cimd_allow_private: bool = False
    oauth_cimd_cache_max_seconds: int = 300
    limits: Limits = field(default_factory=Limits)
    # PostgreSQL engines (docs/decisions/engines.md). "transaction": both URLs may be a
    # transaction-mode pooler (no named statements, settings per transaction). The read URL
    # takes every tool call's reads of retained records; None: the primary serves them too.
    database_pooler: str = "none"
    # Through a pooler, who applies statement_timeout and jit: "per_transaction" (SET LOCAL on
    # each transaction's BEGIN) or "server" (the role's or database's own; fewer round trips).
    database_pooler_settings: str = "per_transaction"
    database_read_url: str | None = None
    # Failover (docs/operations.md, Database failover): a new connection gives up on a host
    # after the connect timeout (default: 5 s, or a quarter of the request deadline if less)
    # and tries the next host of a multi-host URL; an open connection whose sent bytes or
    # keepalive probes go unacknowledged for the TCP timeout is closed (TCP_USER_TIMEOUT).
    database_connect_timeout_seconds: float = 5.0
    database_tcp_timeout_seconds: float = 10.0
    redis_engine: RedisEngine = field(default_factory=RedisEngine)
    shedding: Shedding = field(default_factory=Shedding)
    connections: Connections = field(default_factory=Connections)
    registration: Registration = field(default_factory=Registration)
    trusted_proxies: TrustedProxies = field(default_factory=TrustedProxies)
    signin_throttle: SigninThrottle = field(default_factory=SigninThrottle)
    # OpenTelemetry traces (service/tracing/): whether the standard OTEL_* variables name an
    # OTLP endpoint (and do not disable the SDK). The SDK reads the variables themselves.
    tracing: bool = False
    audit: Audit = field(default_factory=Audit)

    @property
    def mcp_resource(self) -> str:
        """The MCP resource identifier: the audience of every access token."""
        return self.public_url + "/mcp"

    @property
    def issuer(self) -> str:
        """The OAuth issuer identifier (this service is its own authorization server)."""
        return self.public_url

    @property
    def public_origin(self) -> str:
        parts = urlsplit(self.public_url)
        return f"{parts.scheme}://{parts.netloc}"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, need_key: bool = True) -> Config:
        """Parse every setting; raise ConfigError naming the first bad variable."""
        env = os.environ if env is None else env
        host = _str(env, "ELOVA_HOST", "127.0.0.1")
        port = _parse(env, "ELOVA_PORT", _port, 8080)
        public_url = _parse(env, "ELOVA_PUBLIC_URL", _base_url, f"http://{_url_host(host)}:{port}")
        key = _signing_key(env) if need_key else b""
        limits = Limits(
            global_concurrency=_parse(env, "ELOVA_LIMIT_GLOBAL_CONCURRENCY", _positive_int, 4),
            account_concurrency=_parse(env, "ELOVA_LIMIT_ACCOUNT_CONCURRENCY", _positive_int, 2),
            approval_per_minute=_parse(env, "ELOVA_LIMIT_APPROVAL_PER_MINUTE", _positive_int, 60),
            account_per_day=_parse(env, "ELOVA_LIMIT_ACCOUNT_PER_DAY", _positive_int, None),
            request_deadline_seconds=_parse(
                env, "ELOVA_REQUEST_DEADLINE_SECONDS", _positive_float, 30.0
            ),
            max_body_bytes=_parse(env, "ELOVA_MAX_BODY_BYTES", _positive_int, 32 * 1024),
            max_response_bytes=_parse(env, "ELOVA_MAX_RESPONSE_BYTES", _positive_int, 256 * 1024),
            lease_grace_seconds=_parse(env, "ELOVA_LEASE_GRACE_SECONDS", _grace, 5.0),
            expected_replicas=_parse(env, "ELOVA_EXPECTED_REPLICAS", _positive_int, 1),
            redis_timeout_seconds=_parse(env, "ELOVA_REDIS_TIMEOUT_MS", _millis, 0.25),
            breaker_failures=_parse(env, "ELOVA_REDIS_BREAKER_FAILURES", _positive_int, 3),
            breaker_cooldown_seconds=_parse(
                env, "ELOVA_REDIS_BREAKER_COOLDOWN_SECONDS", _positive_float, 1.0
            ),
        )
        return cls(
            database_url=_required(env, "ELOVA_DATABASE_URL", primary_database_url),
            redis_url=_parse(env, "ELOVA_REDIS_URL", _redis_url, None),
            redis_key_prefix=_parse(env, "ELOVA_REDIS_KEY_PREFIX", _key_prefix, "elova:"),
            host=host,
            port=port,
            public_url=public_url,
            signing_key_pem=key,
            previous_signing_keys_pem=_previous_keys(env),
            metrics_port=_parse(env, "ELOVA_METRICS_PORT", _port, None),
            allowed_origins=_parse(env, "ELOVA_ALLOWED_ORIGINS", _origins, ()),
            db_pool_min=_parse(env, "ELOVA_DB_POOL_MIN", _positive_int, 2),
            db_pool_max=_pool_max(env),
            log_level=_parse(env, "ELOVA_LOG_LEVEL", _log_level, "INFO"),
            access_token_ttl_seconds=_parse(env, "ELOVA_ACCESS_TOKEN_TTL_SECONDS", _token_ttl, 300),
            drain_seconds=_parse(env, "ELOVA_DRAIN_SECONDS", _non_negative_float, 5.0),
            oauth_cimd_allow_private=_parse(env, "ELOVA_OAUTH_CIMD_ALLOW_PRIVATE", _flag, False),
            oauth_cimd_cache_max_seconds=_parse(
                env, "ELOVA_OAUTH_CIMD_CACHE_MAX_SECONDS", _cimd_cache_seconds, 300
            ),
            limits=limits,
            database_pooler=_parse(env, "ELOVA_DATABASE_POOLER", _pooler, "none"),
            database_pooler_settings=_parse(
                env, "ELOVA_DATABASE_POOLER_SETTINGS", _pooler_settings, "per_transaction"
            ),
            database_read_url=_parse(env, "ELOVA_DATABASE_READ_URL", database_url, None),
            # Per host: a silent first host must leave a request time for the next one.
            database_connect_timeout_seconds=_parse(
                env,
                "ELOVA_DATABASE_CONNECT_TIMEOUT_SECONDS",
                _positive_float,
                min(5.0, limits.request_deadline_seconds / 4),
            ),
            database_tcp_timeout_seconds=_parse(
                env, "ELOVA_DATABASE_TCP_TIMEOUT_SECONDS", _positive_float, 10.0
            ),
            redis_engine=_redis_engine(env),
            shedding=_shedding(env),
            tracing=tracing_configured(env),
            connections=Connections(
                max_connections=_parse(env, "ELOVA_MAX_CONNECTIONS", _positive_int, 1000),
                header_timeout_seconds=_parse(
                    env, "ELOVA_HEADER_TIMEOUT_SECONDS", _positive_float, 10.0
                ),
                body_timeout_seconds=_parse(
                    env, "ELOVA_BODY_TIMEOUT_SECONDS", _positive_float, 10.0
                ),
                keepalive_timeout_seconds=_parse(
                    env, "ELOVA_KEEPALIVE_TIMEOUT_SECONDS", _positive_float, 75.0
                ),
                pace_refusals_after=_parse(env, "ELOVA_PACE_REFUSALS_AFTER", _non_negative_int, 10),
                longest_refusal_pause_seconds=_parse(
                    env, "ELOVA_LONGEST_REFUSAL_PAUSE_MS", _millis, 1.0
                ),
            ),
            registration=_registration(env),
            trusted_proxies=_trusted_proxies(env),
            signin_throttle=_signin_throttle(env),
            audit=_audit(env),
        )


def _raw(env: Mapping[str, str], name: str) -> str:
    """The setting's value, stripped; "" when unset. Set but empty is an error, not "unset":
    `ELOVA_PORT=` is a mistake (a template that lost its value), and a silent default would
    hide it (docs/decisions/ops.md)."""
    if name not in env:
        return ""
    value = env[name].strip()
    if not value:
        raise ConfigError(
            f"{name} is set but empty; give it a value, or unset it to use the default"
        )
    return value


def _pool_max(env: Mapping[str, str]) -> int:
    """ELOVA_DB_POOL_MAX, refused when below ELOVA_DB_POOL_MIN."""
    low = _parse(env, "ELOVA_DB_POOL_MIN", _positive_int, 2)
    high = _parse(env, "ELOVA_DB_POOL_MAX", _positive_int, 10)
    if low > high:
        raise ConfigError(
            f"ELOVA_DB_POOL_MIN ({low}) is larger than ELOVA_DB_POOL_MAX ({high}); "
            "lower the minimum or raise the maximum"
        )
    return high


def _shedding(env: Mapping[str, str]) -> Shedding:
    """ELOVA_SHED_LOOP_LAG_MS (0: off) and ELOVA_SHED_MAX_INFLIGHT (unset: 2 x the pool)."""
    lag_ms = _parse(env, "ELOVA_SHED_LOOP_LAG_MS", _lag_millis, 50)
    inflight = _parse(env, "ELOVA_SHED_MAX_INFLIGHT", _positive_int, 2 * _pool_max(env))
    return Shedding(loop_lag_seconds=lag_ms / 1000, max_inflight=inflight)


def _lag_millis(raw: str) -> int:
    value = int(raw)
    if not 0 <= value <= 10_000:
        raise ValueError(f"expected milliseconds from 0 (off) to 10000, got {raw!r}")
    return value


def _str(env: Mapping[str, str], name: str, default: str) -> str:
    return _raw(env, name) or default


def _parse(env: Mapping[str, str], name: str, conv: Callable[[str], T], default: T) -> T:
    raw = _raw(env, name)
    if not raw:
        return default
    try:
        return conv(raw)
    except (ValueError, TypeError) as err:
        reason = str(err)
        if reason.startswith(("invalid literal", "could not convert")):
            reason = f"expected a number, got {raw!r}"  # int()/float()'s own words
        raise ConfigError(f"{name} is malformed: {reason}") from err


def _required(env: Mapping[str, str], name: str, conv: Callable[[str], T]) -> T:
    raw = _raw(env, name)
    if not raw:
        raise ConfigError(f"{name} is required but not set")
    value = _parse(env, name, conv, None)  # raw is set: the converter's error names `name`
    assert value is not None
    return value


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise ValueError(f"expected a whole number >= 1, got {raw!r}")
    return value


def _non_negative_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError(f"expected a whole number >= 0, got {raw!r}")
    return value


def _positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(f"expected a positive number of seconds, got {raw!r}")
    return value


def _millis(raw: str) -> float:
    value = int(raw)
    if not 1 <= value <= 60_000:
        raise ValueError(f"expected milliseconds from 1 to 60000, got {raw!r}")
    return value / 1000


def _non_negative_float(raw: str) -> float:
    value = float(raw)
    if not 0 <= value < float("inf"):
        raise ValueError(f"expected a number of seconds >= 0, got {raw!r}")
    return value


def _grace(raw: str) -> float:
    value = float(raw)
    if not 0 <= value <= 5:
        raise ValueError("the lease grace is at most 5 seconds (docs/limits.md)")
    return value


def _token_ttl(raw: str) -> int:
    value = int(raw)
    if not 1 <= value <= 300:
        raise ValueError("access tokens last at most 300 seconds")
    return value


def _port(raw: str) -> int:
    value = int(raw)
    if not 0 <= value <= 65535:
        raise ValueError(f"not a TCP port: {raw!r}")
    return value


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _base_url(raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"expected an http(s) base URL such as https://mcp.example.com, got {raw!r}"
        )
    if parts.path.strip("/") or parts.query or parts.fragment or "?" in raw or "#" in raw:
        base = f"{parts.scheme}://{parts.netloc}"
        raise ValueError(
            f"give the base URL ({base}), without a path, query or fragment; "
            f"the MCP endpoint is {base}/mcp"
        )
    return raw.rstrip("/")


def _origins(raw: str) -> tuple[str, ...]:
    out = []
    for item in raw.split(","):
        item = item.strip().rstrip("/")
        if not item:
            continue
        parts = urlsplit(item)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path:
            raise ValueError(f"expected origins like https://app.example.com, got {item!r}")
        out.append(item)
    return tuple(out)


def _pooler(raw: str) -> str:
    if raw not in ("none", "transaction"):
        raise ValueError("expected none or transaction")
    return raw


def _pooler_settings(raw: str) -> str:
    if raw not in ("per_transaction", "server"):
        raise ValueError("expected per_transaction or server")
    return raw


def _redis_url(raw: str) -> str:
    if urlsplit(raw).scheme not in ("redis", "rediss", "unix"):
        raise ValueError("expected a redis://, rediss:// or unix:// URL")
    return raw


def _log_level(raw: str) -> str:
    level = raw.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ValueError("expected DEBUG, INFO, WARNING or ERROR")
    return level


def _signing_key(env: Mapping[str, str]) -> bytes:
    inline = _raw(env, "ELOVA_SIGNING_KEY")
    path = _raw(env, "ELOVA_SIGNING_KEY_FILE")
    if inline and path:
        raise ConfigError("set ELOVA_SIGNING_KEY or ELOVA_SIGNING_KEY_FILE, not both")
    if path:
        try:
            with open(path, "rb") as fh:
                pem = fh.read()
        except OSError as err:
            raise ConfigError(f"ELOVA_SIGNING_KEY_FILE cannot be read: {err.strerror}") from err
        name = "ELOVA_SIGNING_KEY_FILE"
    elif inline:
        pem, name = inline.encode(), "ELOVA_SIGNING_KEY"
    else:
        raise ConfigError(
            "ELOVA_SIGNING_KEY_FILE or ELOVA_SIGNING_KEY is required but not set; make a key "
            "with `openssl genpkey -algorithm ed25519 -out signing-key.pem`"
        )
    _check_pem(name, pem)
    return pem


def _previous_keys(env: Mapping[str, str]) -> tuple[bytes, ...]:
    """Verification-only keys kept during a rotation (ELOVA_PREVIOUS_SIGNING_KEY_FILES)."""
    raw = _raw(env, "ELOVA_PREVIOUS_SIGNING_KEY_FILES")
    keys = []
    for path in filter(None, (p.strip() for p in raw.split(","))):
        try:
            with open(path, "rb") as fh:
                pem = fh.read()
        except OSError as err:
            raise ConfigError(
                f"ELOVA_PREVIOUS_SIGNING_KEY_FILES: {path} cannot be read: {err.strerror}"
            ) from err
        _check_pem("ELOVA_PREVIOUS_SIGNING_KEY_FILES", pem)
        keys.append(pem)
    return tuple(keys)


def _flag(raw: str) -> bool:
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise ValueError("must be true or false")


def _cimd_cache_seconds(raw: str) -> int:
    value = int(raw)
    if not 0 <= value <= 86400:
        raise ValueError("must be between 0 and 86400 seconds")
    return value


def _check_pem(name: str, pem: bytes) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as err:
        raise ConfigError(
            f"{name} is not an unencrypted PEM private key; give an Ed25519 or EC P-256 key "
            "in PEM (`openssl genpkey -algorithm ed25519`)"
        ) from err
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return
    if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
        return
    raise ConfigError(
        f"{name} must be an Ed25519 or EC P-256 private key (`openssl genpkey -algorithm ed25519`)"
    )
