"""The admission's settings (issue 39): the wait for a slot, its bounds, the fleet-wide cap
and the key layout, with their defaults, and a bad value refused naming its variable."""

from __future__ import annotations

import pytest

from service.config import Config
from service.errors import ConfigError
from tests.support.keys import ed25519_pem

pytestmark = pytest.mark.unit

BASE = {"ELOVA_DATABASE_URL": "postgresql://postgres@127.0.0.1/x"}


def _config(**extra: str) -> Config:
    return Config.from_env({**BASE, "ELOVA_SIGNING_KEY": ed25519_pem().decode(), **extra})


def test_defaults() -> None:
    limits = _config().limits
    assert limits.slot_wait_seconds == 2.0
    assert (limits.waiters, limits.waiters_per_account) == (256, 8)
    assert limits.fleet_concurrency is None


def test_settings_are_read() -> None:
    limits = _config(
        ELOVA_LIMIT_SLOT_WAIT_MS="0",
        ELOVA_LIMIT_WAITERS="10",
        ELOVA_LIMIT_WAITERS_PER_ACCOUNT="3",
        ELOVA_LIMIT_FLEET_CONCURRENCY="40",
    ).limits
    assert limits.slot_wait_seconds == 0
    assert (limits.waiters, limits.waiters_per_account, limits.fleet_concurrency) == (10, 3, 40)


def test_key_layout_follows_the_mode_unless_set() -> None:
    assert _config().redis_engine.key_layout == "one-slot"
    cluster = {"ELOVA_REDIS_MODE": "cluster", "ELOVA_REDIS_URL": "redis://node:6379/0"}
    assert _config(**cluster).redis_engine.key_layout == "account-slot"
    chosen = _config(**cluster, ELOVA_REDIS_KEY_LAYOUT="one-slot")
    assert chosen.redis_engine.key_layout == "one-slot"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ELOVA_LIMIT_SLOT_WAIT_MS", "-1"),
        ("ELOVA_LIMIT_SLOT_WAIT_MS", "30001"),
        ("ELOVA_LIMIT_SLOT_WAIT_MS", "soon"),
        ("ELOVA_LIMIT_FLEET_CONCURRENCY", "0"),
        ("ELOVA_LIMIT_WAITERS", "-3"),
        ("ELOVA_REDIS_KEY_LAYOUT", "per-tenant"),
    ],
)
def test_a_bad_value_names_its_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        _config(**{variable: value})
