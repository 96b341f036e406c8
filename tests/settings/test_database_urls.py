"""PostgreSQL URLs as libpq names hosts: the (host, port) pairs the service connects to, one
at a time, and the target_session_attrs it asks each for."""

from __future__ import annotations

import pytest

from service.settings.database import db_hosts, host_count, session_attrs

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("url", "hosts"),
    [
        ("postgresql://u@db/elova", [("db", None)]),
        (
            "postgresql://u:pw@primary:5432,standby:5433/elova",
            [("primary", 5432), ("standby", 5433)],
        ),
        ("postgresql://u@a,b:5433/elova", [("a", None), ("b", 5433)]),
        ("postgresql://u@[::1]:5432,[fd00::2]/elova", [("::1", 5432), ("fd00::2", None)]),
        ("postgresql:///elova?host=a,b&port=1,2", [("a", 1), ("b", 2)]),
        ("postgresql:///elova?host=a,b&port=7", [("a", 7), ("b", 7)]),
        ("postgresql://u@db/elova?port=6000", [("db", 6000)]),
        ("postgresql:///elova", []),
    ],
)
def test_hosts_in_order(url: str, hosts: list[tuple[str, int | None]]) -> None:
    assert db_hosts(url) == hosts
    assert host_count(url) == max(len(hosts), 1)


@pytest.mark.parametrize(
    ("url", "attrs"),
    [
        ("postgresql://u@a,b/e?target_session_attrs=read-write", "read-write"),
        (
            "postgresql://u@a/e?sslmode=require&target_session_attrs=prefer-standby",
            "prefer-standby",
        ),
        ("postgresql://u@a/e", None),
    ],
)
def test_target_session_attrs(url: str, attrs: str | None) -> None:
    assert session_attrs(url) == attrs
