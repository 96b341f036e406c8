"""Which Redis the limiter talks to: the URL, the key prefix and the engine (standalone,
Cluster or Sentinel, docs/decisions/engines.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from service.errors import ConfigError
from service.settings.variables import parse, read_section, setting, value_of

REDIS_MODES = ("standalone", "cluster", "sentinel")

# Where the admission's keys live (service/limits/script_calls.py): in the account's own
# hash slot, or all in one slot under the `{limits}` tag, named as the releases before
# per-account slots named them (so a rolling deploy from one shares their ledgers).
ACCOUNT_SLOT = "account-slot"
ONE_SLOT = "one-slot"
KEY_LAYOUTS = (ACCOUNT_SLOT, ONE_SLOT)


def _key_layout(raw: str) -> str:
    if raw not in KEY_LAYOUTS:
        raise ValueError(f"expected {' or '.join(KEY_LAYOUTS)}, got {raw!r}")
    return raw


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


@dataclass(frozen=True)
class RedisEngine:
    """Which Redis the limiter talks to: ELOVA_REDIS_MODE and, for Sentinel, where the
    sentinels are and which master they guard. In sentinel mode ELOVA_REDIS_URL is optional
    and only its credentials, database number, scheme (rediss = TLS) and query options apply
    (to the master and, for the scheme and TLS options, to the sentinels, which take their
    own password from ELOVA_REDIS_SENTINEL_PASSWORD)."""

    mode: str = setting("ELOVA_REDIS_MODE", _redis_mode, "standalone")
    sentinels: tuple[tuple[str, int], ...] = setting("ELOVA_REDIS_SENTINELS", _sentinels, ())
    sentinel_master: str | None = setting("ELOVA_REDIS_SENTINEL_MASTER", str, None)
    # the sentinels' own password
    sentinel_password: str | None = setting("ELOVA_REDIS_SENTINEL_PASSWORD", str, None, shown=False)
    # ELOVA_REDIS_KEY_LAYOUT (read_redis_engine); by default account-slot in cluster mode
    # (where slots matter), one-slot otherwise (one server holds every slot; the keys keep
    # their earlier names).
    key_layout: str = ONE_SLOT


def read_redis_engine(env: Mapping[str, str]) -> RedisEngine:
    engine = read_section(RedisEngine, env)
    mode, sentinels, master = engine.mode, engine.sentinels, engine.sentinel_master
    sentinel_password = engine.sentinel_password
    url = value_of(env, "ELOVA_REDIS_URL")
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
    default_layout = ACCOUNT_SLOT if mode == "cluster" else ONE_SLOT
    layout = parse(env, "ELOVA_REDIS_KEY_LAYOUT", _key_layout, default_layout)
    return dataclasses.replace(engine, key_layout=layout)


def key_prefix(raw: str) -> str:
    # Redis hashes the first non-empty {…} of a key. An empty {} in the prefix would make
    # every limiter key hash as a whole: the keys of one admission would land in different
    # cluster slots (CROSSSLOT) and the script could not run. A non-empty {tag} is allowed,
    # but it comes before each account's own tag: every limiter key then shares the
    # prefix's one slot, and one master serves every admission (docs/operations.md).
    if "{}" in raw:
        raise ValueError("an empty {} would split the limiter's keys across cluster slots")
    return raw


def redis_url(raw: str) -> str:
    if urlsplit(raw).scheme not in ("redis", "rediss", "unix"):
        raise ValueError("expected a redis://, rediss:// or unix:// URL")
    return raw
