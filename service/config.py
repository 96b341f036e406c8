"""Service configuration: one frozen object parsed once from an injected mapping.

Every setting is an ``ELOVA_*`` environment variable. ``Config.from_env`` takes any
``Mapping[str, str]`` so tests pass a dict instead of patching ``os.environ``. A missing
or malformed value raises ``ConfigError`` naming the variable, and the start stops there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from service.edge.paths import MCP_PATH
from service.errors import ConfigError
from service.settings.audit import Audit, read_audit
from service.settings.database import database_url as read_url
from service.settings.database import primary_database_url
from service.settings.limits import (
    POOL_MAX,
    POOL_MIN,
    Connections,
    Limits,
    Shedding,
    read_pool_max,
    read_shedding,
)
from service.settings.oauth import (
    Registration,
    SigninThrottle,
    read_registration,
    read_signin_throttle,
)
from service.settings.proxies import TrustedProxies, read_trusted_proxies
from service.settings.redis import RedisEngine, key_prefix, read_redis_engine
from service.settings.redis import redis_url as redis_server_url
from service.settings.tracing import configured as tracing_configured
from service.settings.variables import (
    Setting,
    flag,
    non_negative_float,
    parse,
    positive_float,
    read_section,
    required,
    setting,
    setting_of,
    tcp_port,
    value_of,
)


def _token_ttl(raw: str) -> int:
    value = int(raw)
    if not 1 <= value <= 300:
        raise ValueError("access tokens last at most 300 seconds")
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


def _log_level(raw: str) -> str:
    level = raw.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ValueError("expected DEBUG, INFO, WARNING or ERROR")
    return level


def _cimd_cache_seconds(raw: str) -> int:
    value = int(raw)
    if not 0 <= value <= 86400:
        raise ValueError("must be between 0 and 86400 seconds")
    return value


# The connect timeout's default is shortened to a quarter of the request deadline when that
# is less (read in Config.from_env).
CONNECT_TIMEOUT = Setting("ELOVA_DATABASE_CONNECT_TIMEOUT_SECONDS", positive_float, 5.0)


@dataclass(frozen=True)
class Config:
    database_url: str
    redis_url: str | None = setting("ELOVA_REDIS_URL", redis_server_url, None)
    redis_key_prefix: str = setting("ELOVA_REDIS_KEY_PREFIX", key_prefix, "elova:")
    host: str = setting("ELOVA_HOST", str, "127.0.0.1")
    port: int = setting("ELOVA_PORT", tcp_port, 8080)
    public_url: str = "http://127.0.0.1:8080"  # from_env: ELOVA_PUBLIC_URL, unset from host:port
    signing_key_pem: bytes = b""
    previous_signing_keys_pem: tuple[bytes, ...] = ()
    metrics_port: int | None = setting("ELOVA_METRICS_PORT", tcp_port, None)
    allowed_origins: tuple[str, ...] = setting("ELOVA_ALLOWED_ORIGINS", _origins, ())
    db_pool_min: int = POOL_MIN.field()
    db_pool_max: int = POOL_MAX.field()
    log_level: str = setting("ELOVA_LOG_LEVEL", _log_level, "INFO")
    access_token_ttl_seconds: int = setting("ELOVA_ACCESS_TOKEN_TTL_SECONDS", _token_ttl, 300)
    # after SIGTERM: readiness fails, the listener serves on this long
    drain_seconds: float = setting("ELOVA_DRAIN_SECONDS", non_negative_float, 5.0)
    # Client ID Metadata Documents (service/auth/clients/metadata_documents.py): fetching
    # private, loopback and link-local addresses (and http on loopback) only for tests and
    # private deployments; a fetched document is reused for at most this long.
    oauth_cimd_allow_private: bool = setting("ELOVA_OAUTH_CIMD_ALLOW_PRIVATE", flag, False)
    # Whether the metadata says `authorization_response_iss_parameter_supported` (RFC 9207);
    # `iss` is sent on every redirect either way (some clients refuse the advertisement).
    oauth_advertise_iss_parameter: bool = setting("ELOVA_OAUTH_ADVERTISE_ISS_PARAMETER", flag, True)
    oauth_cimd_cache_max_seconds: int = setting(
        "ELOVA_OAUTH_CIMD_CACHE_MAX_SECONDS", _cimd_cache_seconds, 300
    )
    limits: Limits = field(default_factory=Limits)
    # PostgreSQL engines (docs/decisions/engines.md). "transaction": both URLs may be a
    # transaction-mode pooler (no named statements, settings per transaction). The read URL
    # takes every tool call's reads of retained records; None: the primary serves them too.
    database_pooler: str = setting("ELOVA_DATABASE_POOLER", _pooler, "none")
    # Through a pooler, who applies statement_timeout and jit: "per_transaction" (SET LOCAL on
    # each transaction's BEGIN) or "server" (the role's or database's own; fewer round trips).
    database_pooler_settings: str = setting(
        "ELOVA_DATABASE_POOLER_SETTINGS", _pooler_settings, "per_transaction"
    )
    database_read_url: str | None = setting("ELOVA_DATABASE_READ_URL", read_url, None)
    # Failover (docs/operations.md, Database failover): a new connection gives up on a host
    # after the connect timeout and tries the next host of a multi-host URL; an open
    # connection whose sent bytes or keepalive probes go unacknowledged for the TCP timeout
    # is closed (TCP_USER_TIMEOUT).
    database_connect_timeout_seconds: float = CONNECT_TIMEOUT.field()
    database_tcp_timeout_seconds: float = setting(
        "ELOVA_DATABASE_TCP_TIMEOUT_SECONDS", positive_float, 10.0
    )
    redis_engine: RedisEngine = field(default_factory=RedisEngine)
    shedding: Shedding = field(default_factory=Shedding)
    connections: Connections = field(default_factory=Connections)
    registration: Registration = field(default_factory=Registration)
    trusted_proxies: TrustedProxies = field(default_factory=TrustedProxies)
    signin_throttle: SigninThrottle = field(default_factory=SigninThrottle)
    # OpenTelemetry traces (service/observability/tracing/): whether the standard OTEL_*
    # variables name an OTLP endpoint (and do not disable the SDK, service/settings/tracing.py).
    # The SDK reads the variables themselves.
    tracing: bool = False
    audit: Audit = field(default_factory=Audit)

    @property
    def mcp_resource(self) -> str:
        """The MCP resource identifier: the audience of every access token."""
        return self.public_url + MCP_PATH

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
        host, port = setting_of(cls, "host").read(env), setting_of(cls, "port").read(env)
        public_url = parse(env, "ELOVA_PUBLIC_URL", _base_url, f"http://{_url_host(host)}:{port}")
        key = _signing_key(env) if need_key else b""
        limits = read_section(Limits, env)
        return read_section(
            cls,
            env,
            database_url=required(env, "ELOVA_DATABASE_URL", primary_database_url),
            host=host,
            port=port,
            public_url=public_url,
            signing_key_pem=key,
            previous_signing_keys_pem=_previous_keys(env),
            db_pool_max=read_pool_max(env),
            limits=limits,
            # Per host: a silent first host must leave a request time for the next one.
            database_connect_timeout_seconds=CONNECT_TIMEOUT.read_or(
                env, min(CONNECT_TIMEOUT.default, limits.request_deadline_seconds / 4)
            ),
            redis_engine=read_redis_engine(env),
            shedding=read_shedding(env),
            tracing=tracing_configured(env),
            connections=read_section(Connections, env),
            registration=read_registration(env),
            trusted_proxies=read_trusted_proxies(env),
            signin_throttle=read_signin_throttle(env),
            audit=read_audit(env),
        )


def _signing_key(env: Mapping[str, str]) -> bytes:
    inline = value_of(env, "ELOVA_SIGNING_KEY")
    path = value_of(env, "ELOVA_SIGNING_KEY_FILE")
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
    raw = value_of(env, "ELOVA_PREVIOUS_SIGNING_KEY_FILES")
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
