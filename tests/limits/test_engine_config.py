"""ELOVA_REDIS_MODE and its settings (issue 12): parsed, and refused loudly (the message
names the variable) when they cannot work; the key prefix rule that keeps every limiter key
in one cluster slot."""

from __future__ import annotations

import os
import subprocess
import sys
from uuid import UUID, uuid4

import pytest
from redis.crc import key_slot

from service.config import Config
from service.errors import ConfigError
from service.limits.admission import Admission
from service.observability.metrics.app_metrics import Metrics
from service.settings.redis import ACCOUNT_SLOT, ONE_SLOT
from tests.support.keys import ed25519_pem

pytestmark = pytest.mark.unit

BASE = {"ELOVA_DATABASE_URL": "postgresql://u@h/db"}


def parse(**env: str) -> Config:
    return Config.from_env({**BASE, **{f"ELOVA_{k}": v for k, v in env.items()}}, need_key=False)


def test_standalone_is_the_default() -> None:
    engine = parse().redis_engine
    assert (engine.mode, engine.sentinels, engine.sentinel_master) == ("standalone", (), None)


def test_sentinel_settings_are_parsed_and_the_url_may_be_left_unset() -> None:
    cfg = parse(
        REDIS_MODE="sentinel",
        REDIS_SENTINELS="10.0.0.1:26379, sentinel-b:26380,[::1]:26381",
        REDIS_SENTINEL_MASTER="elova",
    )
    assert cfg.redis_url is None
    assert cfg.redis_engine.sentinels == (
        ("10.0.0.1", 26379),
        ("sentinel-b", 26380),
        ("::1", 26381),
    )
    assert cfg.redis_engine.sentinel_master == "elova"
    assert cfg.redis_engine.sentinel_password is None
    assert "pw" not in repr(
        parse(
            REDIS_MODE="sentinel",
            REDIS_SENTINELS="a:1",
            REDIS_SENTINEL_MASTER="m",
            REDIS_SENTINEL_PASSWORD="pw",
        )
    )


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"REDIS_MODE": "replicated"}, "ELOVA_REDIS_MODE"),
        ({"REDIS_MODE": "sentinel", "REDIS_SENTINEL_MASTER": "m"}, "ELOVA_REDIS_SENTINELS"),
        ({"REDIS_MODE": "sentinel", "REDIS_SENTINELS": "a:1"}, "ELOVA_REDIS_SENTINEL_MASTER"),
        ({"REDIS_MODE": "sentinel", "REDIS_SENTINELS": "a", "REDIS_SENTINEL_MASTER": "m"},
         "ELOVA_REDIS_SENTINELS"),
        ({"REDIS_MODE": "sentinel", "REDIS_SENTINELS": "a:99999", "REDIS_SENTINEL_MASTER": "m"},
         "ELOVA_REDIS_SENTINELS"),
        ({"REDIS_SENTINELS": "a:1", "REDIS_URL": "redis://h:6379/0"}, "ELOVA_REDIS_SENTINELS"),
        ({"REDIS_MODE": "cluster", "REDIS_SENTINEL_MASTER": "m", "REDIS_URL": "redis://h/0"},
         "ELOVA_REDIS_SENTINEL_MASTER"),
        ({"REDIS_SENTINEL_PASSWORD": "pw", "REDIS_URL": "redis://h/0"},
         "ELOVA_REDIS_SENTINEL_PASSWORD"),
        ({"REDIS_MODE": "cluster"}, "ELOVA_REDIS_URL"),
        ({"REDIS_MODE": "cluster", "REDIS_URL": "unix:///run/redis.sock"}, "ELOVA_REDIS_URL"),
        ({"REDIS_MODE": "cluster", "REDIS_URL": "redis://node-a:6379/2"}, "ELOVA_REDIS_URL"),
        ({"REDIS_KEY_PREFIX": "elova{}:"}, "ELOVA_REDIS_KEY_PREFIX"),
        ({"REDIS_KEY_PREFIX": "{}"}, "ELOVA_REDIS_KEY_PREFIX"),
    ],
)  # fmt: skip
def test_settings_that_cannot_work_are_refused_naming_the_variable(
    env: dict[str, str], variable: str
) -> None:
    with pytest.raises(ConfigError, match=variable):
        parse(**env)


def _keys(prefix: str, layout: str = ACCOUNT_SLOT, account: UUID | None = None) -> list[str]:
    admission = Admission(Config(database_url="x").limits, redis=None, key_prefix=prefix,
                          metrics=Metrics(), key_layout=layout)  # fmt: skip
    return admission.keys(account or uuid4(), uuid4())


@pytest.mark.parametrize("layout", [ACCOUNT_SLOT, ONE_SLOT])
@pytest.mark.parametrize("prefix", ["elova:", "", "team-a:", "svc{tenant-7}:", "a{b:", "x}y{z}:"])
def test_every_limiter_key_of_an_admission_shares_one_slot(prefix: str, layout: str) -> None:
    slots = {key_slot(key.encode()) for key in _keys(prefix, layout)}
    assert len(slots) == 1


def test_each_account_has_its_own_slot_unless_a_tag_in_the_prefix_pins_one() -> None:
    account = uuid4()
    assert {key_slot(k.encode()) for k in _keys("elova:", account=account)} == {
        key_slot(str(account).encode())
    }
    many = {key_slot(_keys("elova:")[0].encode()) for _ in range(200)}
    assert len(many) > 150  # accounts spread over the slots
    assert {key_slot(k.encode()) for k in _keys("svc{tenant-7}:")} == {key_slot(b"tenant-7")}
    # The one-slot layout keeps the names of releases before per-account slots.
    assert {key_slot(k.encode()) for k in _keys("elova:", ONE_SLOT)} == {key_slot(b"limits")}
    assert _keys("elova:", ONE_SLOT, account)[0] == f"elova:{{limits}}:account:{account}"


def test_serve_refuses_to_start_with_an_empty_hash_tag_in_the_prefix() -> None:
    env = {**os.environ, **BASE, "ELOVA_SIGNING_KEY": ed25519_pem().decode(),
           "ELOVA_REDIS_KEY_PREFIX": "elova{}:"}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "service", "serve"], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "ELOVA_REDIS_KEY_PREFIX" in done.stderr
