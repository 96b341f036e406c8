"""The engine settings as `serve` reads them: defaults, accepted values, refusals naming
the variable, and the connection options each pooler setting gives asyncpg."""

from __future__ import annotations

import pytest

from service.config import Config
from service.errors import ConfigError
from service.store.db import PooledConnection, StoreConnection, connect_options

pytestmark = pytest.mark.unit

BASE = {"ELOVA_DATABASE_URL": "postgresql://u@db/elova"}


def _config(**env: str) -> Config:
    return Config.from_env({**BASE, **env}, need_key=False)


def test_defaults_are_a_direct_primary() -> None:
    cfg = _config()
    assert (cfg.database_pooler, cfg.database_pooler_settings) == ("none", "per_transaction")
    assert cfg.database_read_url is None
    options = connect_options(cfg)
    # statements cached, settings at startup; the socket tuned to notice a dead peer
    assert set(options) == {"server_settings", "connection_class"}
    connection = options["connection_class"]
    assert issubclass(connection, StoreConnection)
    assert not issubclass(connection, PooledConnection)
    assert (connection.tcp_timeout_seconds, connection.writes) == (10.0, False)
    assert connect_options(cfg, writes=True)["connection_class"].writes
    assert options["server_settings"]["statement_timeout"] == "31000"
    assert options["server_settings"]["jit"] == "off"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ELOVA_DATABASE_POOLER", "session"),
        ("ELOVA_DATABASE_POOLER_SETTINGS", "role"),
        ("ELOVA_DATABASE_READ_URL", "mysql://replica/elova"),
    ],
)
def test_malformed_engine_settings_name_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        _config(**{variable: value})


def test_transaction_mode_sends_only_what_pgbouncer_tracks() -> None:
    cfg = _config(ELOVA_DATABASE_POOLER="transaction", ELOVA_REQUEST_DEADLINE_SECONDS="4")
    options = connect_options(cfg, "elova-mcp-read")
    # PgBouncer 1.18 refuses every other startup parameter (no ignore_startup_parameters).
    assert options["server_settings"] == {"application_name": "elova-mcp-read", "TimeZone": "UTC"}
    assert options["statement_cache_size"] == 0
    connection = options["connection_class"]
    assert issubclass(connection, PooledConnection)
    assert connection.settings_sql == "SET LOCAL statement_timeout = 5000; SET LOCAL jit = off"
    server = connect_options(_config(ELOVA_DATABASE_POOLER="transaction",
                                     ELOVA_DATABASE_POOLER_SETTINGS="server"))  # fmt: skip
    assert server["connection_class"].settings_sql == ""
