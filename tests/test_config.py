"""Configuration is parsed once, loudly: a bad setting names its variable."""

from __future__ import annotations

import pytest

from service.config import Config
from service.errors import ConfigError
from tests.support.keys import ed25519_pem, p256_pem

pytestmark = pytest.mark.unit

BASE = {"ELOVA_DATABASE_URL": "postgresql://postgres@127.0.0.1/x"}


def env(**extra: str) -> dict[str, str]:
    return {**BASE, "ELOVA_SIGNING_KEY": ed25519_pem().decode(), **extra}


def test_defaults() -> None:
    cfg = Config.from_env(env())
    assert (cfg.host, cfg.port) == ("127.0.0.1", 8080)
    assert cfg.public_url == "http://127.0.0.1:8080"
    assert cfg.mcp_resource == "http://127.0.0.1:8080/mcp"
    assert cfg.redis_url is None
    limits = cfg.limits
    assert (limits.global_concurrency, limits.account_concurrency) == (4, 2)
    assert limits.approval_per_minute == 60 and limits.account_per_day is None
    assert (limits.max_body_bytes, limits.max_response_bytes) == (32768, 262144)
    assert limits.request_deadline_seconds == 30


def test_public_url_trailing_slash_is_dropped() -> None:
    cfg = Config.from_env(env(ELOVA_PUBLIC_URL="https://mcp.example.com/"))
    assert cfg.mcp_resource == "https://mcp.example.com/mcp"


def test_p256_key_is_accepted() -> None:
    Config.from_env({**BASE, "ELOVA_SIGNING_KEY": p256_pem().decode()})


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ELOVA_PORT", "eighty"),
        ("ELOVA_PORT", "70000"),
        ("ELOVA_PUBLIC_URL", "mcp.example.com"),
        ("ELOVA_REDIS_URL", "http://redis"),
        ("ELOVA_LIMIT_GLOBAL_CONCURRENCY", "0"),
        ("ELOVA_REQUEST_DEADLINE_SECONDS", "-1"),
        ("ELOVA_MAX_BODY_BYTES", "lots"),
        ("ELOVA_AUDIT_PEER_BUFFER_BYTES", "0"),
        ("ELOVA_MAX_CONNECTIONS_PER_ADDRESS", "-1"),
        ("ELOVA_SIGNING_KEY", "not a pem"),
        ("ELOVA_OAUTH_ADVERTISE_ISS_PARAMETER", "sometimes"),
    ],
)
def test_malformed_setting_names_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        Config.from_env(env(**{variable: value}))


def test_missing_database_url_is_named() -> None:
    with pytest.raises(ConfigError, match="ELOVA_DATABASE_URL"):
        Config.from_env({"ELOVA_SIGNING_KEY": ed25519_pem().decode()})


def test_missing_signing_key_is_named() -> None:
    with pytest.raises(ConfigError, match="ELOVA_SIGNING_KEY"):
        Config.from_env(BASE)


def test_unreadable_key_file_is_named(tmp_path: object) -> None:
    with pytest.raises(ConfigError, match="ELOVA_SIGNING_KEY_FILE"):
        Config.from_env({**BASE, "ELOVA_SIGNING_KEY_FILE": "/nonexistent/key.pem"})


def test_metadata_document_settings() -> None:
    default = Config.from_env(env())
    assert default.oauth_cimd_allow_private is False
    assert default.oauth_cimd_cache_max_seconds == 300
    cfg = Config.from_env(
        env(ELOVA_OAUTH_CIMD_ALLOW_PRIVATE="true", ELOVA_OAUTH_CIMD_CACHE_MAX_SECONDS="60")
    )
    assert cfg.oauth_cimd_allow_private is True
    assert cfg.oauth_cimd_cache_max_seconds == 60
    assert (
        Config.from_env(env(ELOVA_OAUTH_CIMD_ALLOW_PRIVATE="false")).oauth_cimd_allow_private
        is False
    )
    with pytest.raises(ConfigError, match="ELOVA_OAUTH_CIMD_ALLOW_PRIVATE"):
        Config.from_env(env(ELOVA_OAUTH_CIMD_ALLOW_PRIVATE="maybe"))
    with pytest.raises(ConfigError, match="ELOVA_OAUTH_CIMD_CACHE_MAX_SECONDS"):
        Config.from_env(env(ELOVA_OAUTH_CIMD_CACHE_MAX_SECONDS="100000"))


@pytest.mark.parametrize(
    "variable",
    ["ELOVA_PORT", "ELOVA_HOST", "ELOVA_REDIS_URL", "ELOVA_PUBLIC_URL", "ELOVA_LOG_LEVEL",
     "ELOVA_DATABASE_URL", "ELOVA_SIGNING_KEY", "ELOVA_PREVIOUS_SIGNING_KEY_FILES"],
)  # fmt: skip
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_setting_is_refused_not_unset(variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"{variable} is set but empty"):
        Config.from_env(env(**{variable: value}))


@pytest.mark.parametrize(
    "url",
    ["https://x.example/mcp", "https://x.example/base/", "https://x.example/?a=1",
     "https://x.example#top", "https://x.example/?"],
)  # fmt: skip
def test_public_url_is_a_base_url(url: str) -> None:
    with pytest.raises(ConfigError, match="ELOVA_PUBLIC_URL") as raised:
        Config.from_env(env(ELOVA_PUBLIC_URL=url))
    assert "the MCP endpoint is https://x.example/mcp" in str(raised.value)


def test_pool_minimum_above_maximum_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"ELOVA_DB_POOL_MIN \(20\).*ELOVA_DB_POOL_MAX \(5\)"):
        Config.from_env(env(ELOVA_DB_POOL_MIN="20", ELOVA_DB_POOL_MAX="5"))
    with pytest.raises(ConfigError, match="ELOVA_DB_POOL_MAX"):
        Config.from_env(env(ELOVA_DB_POOL_MIN="11"))  # above the default maximum
    assert Config.from_env(env(ELOVA_DB_POOL_MIN="5", ELOVA_DB_POOL_MAX="5")).db_pool_max == 5


def test_a_malformed_database_url_names_the_variable_and_an_example() -> None:
    for bad in ("foo", "postgresql://u@h:99999/db"):
        with pytest.raises(ConfigError, match="ELOVA_DATABASE_URL is malformed"):
            Config.from_env(env(ELOVA_DATABASE_URL=bad))


def test_registration_settings() -> None:
    defaults = Config.from_env(env()).registration
    assert (defaults.burst, defaults.per_hour) == (10, 30)
    assert (defaults.unused_retention_hours, defaults.sweep_seconds) == (168, 600.0)
    cfg = Config.from_env(
        env(
            ELOVA_OAUTH_REGISTER_BURST="3",
            ELOVA_OAUTH_REGISTER_PER_HOUR="7",
            ELOVA_OAUTH_UNUSED_CLIENT_RETENTION_HOURS="24",
            ELOVA_OAUTH_CLIENT_SWEEP_SECONDS="0.5",
        )
    ).registration
    assert (cfg.burst, cfg.per_hour, cfg.unused_retention_hours, cfg.sweep_seconds) == (
        3, 7, 24, 0.5,
    )  # fmt: skip
    for variable, value in [
        ("ELOVA_OAUTH_REGISTER_BURST", "0"),
        ("ELOVA_OAUTH_REGISTER_PER_HOUR", "many"),
        ("ELOVA_OAUTH_UNUSED_CLIENT_RETENTION_HOURS", "-1"),
        ("ELOVA_OAUTH_CLIENT_SWEEP_SECONDS", "0"),
    ]:
        with pytest.raises(ConfigError, match=variable):
            Config.from_env(env(**{variable: value}))


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@primary:5432,standby:5432/elova?target_session_attrs=read-write",
        "postgresql://u:pw@primary,standby:5433/elova?target_session_attrs=primary",
        "postgresql://u@[::1]:5432,[fd00::2]/elova?target_session_attrs=read-write",
        "postgresql:///elova?host=primary,standby&port=5432,5433&target_session_attrs=read-write",
        "postgres://u@db/elova?target_session_attrs=read-write",
    ],
)
def test_multi_host_database_urls_are_accepted(url: str) -> None:
    assert Config.from_env(env(ELOVA_DATABASE_URL=url)).database_url == url


@pytest.mark.parametrize("attrs", ["prefer-standby", "any", "read-only", "standby", "primary"])
def test_the_read_url_takes_every_target_session_attrs(attrs: str) -> None:
    url = f"postgresql://u@standby1,standby2/elova?target_session_attrs={attrs}"
    assert Config.from_env(env(ELOVA_DATABASE_READ_URL=url)).database_read_url == url


@pytest.mark.parametrize(
    ("variable", "url", "reason"),
    [
        ("ELOVA_DATABASE_URL", "postgresql://u:s3cret@a:5432,b:x/db", "not a TCP port"),
        ("ELOVA_DATABASE_URL", "postgresql://u:s3cret@a:1,b:2/db", "target_session_attrs"),
        (
            "ELOVA_DATABASE_URL",
            "postgresql://u:s3cret@a/db?target_session_attrs=standby",
            "would send writes to a standby",
        ),  # fmt: skip
        ("ELOVA_DATABASE_URL", "postgresql:///db?host=a,b&port=1,99999", "not a TCP port"),
        (
            "ELOVA_DATABASE_READ_URL",
            "postgresql://u:s3cret@a,b/db?target_session_attrs=some",
            "must be one of",
        ),  # fmt: skip
    ],
)
def test_a_malformed_multi_host_url_names_the_variable_not_the_password(
    variable: str, url: str, reason: str
) -> None:
    with pytest.raises(ConfigError, match=f"{variable} is malformed: .*{reason}") as raised:
        Config.from_env(env(**{variable: url}))
    assert "s3cret" not in str(raised.value)


def test_failover_settings_have_defaults_and_refuse_nonsense() -> None:
    cfg = Config.from_env(env())
    assert (cfg.database_connect_timeout_seconds, cfg.database_tcp_timeout_seconds) == (5, 10)
    tuned = env(ELOVA_DATABASE_CONNECT_TIMEOUT_SECONDS="2", ELOVA_DATABASE_TCP_TIMEOUT_SECONDS="4")
    assert Config.from_env(tuned).database_tcp_timeout_seconds == 4
    for variable in (
        "ELOVA_DATABASE_CONNECT_TIMEOUT_SECONDS",
        "ELOVA_DATABASE_TCP_TIMEOUT_SECONDS",
    ):
        with pytest.raises(ConfigError, match=variable):
            Config.from_env(env(**{variable: "0"}))
