"""Registration bounds against the real app (PostgreSQL, Redis): every kept field and the
document have a bound and a value over it is refused naming the field; fields the service
does not use are neither stored nor echoed; one address gets a burst of registrations and
then 429s with an accurate Retry-After, shared by two app instances on one Redis."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from service.app import create_app
from service.app_keys import DB_POOL, METRICS
from service.config import Config
from service.limits.registrations import address_key
from tests.auth.browser_flow import OAuth
from tests.auth.flow import REDIRECT_URI
from tests.auth.helpers import ClientFactory
from tests.support.services import new_redis_prefix

App = TestClient[web.Request, web.Application]
GOOD: dict[str, Any] = {"redirect_uris": [REDIRECT_URI], "client_name": "Bounded"}


def refusals(http: App, reason: str) -> float:
    value = http.app[METRICS].registry.get_sample_value(
        "elova_mcp_registration_refusals_total", {"reason": reason}
    )
    return value or 0.0


async def stored_clients(http: App) -> int:
    return int(await http.app[DB_POOL].fetchval("SELECT count(*) FROM oauth_clients"))


async def test_a_20000_character_logo_uri_is_refused_and_not_stored(oauth: OAuth) -> None:
    before = await stored_clients(oauth.http)
    resp = await oauth.http.post(
        "/register", json={**GOOD, "logo_uri": "https://a.example/" + "x" * 20_000}
    )
    assert resp.status == 400
    answer = await resp.json()
    assert answer["error"] == "invalid_client_metadata"
    assert "logo_uri" in answer["error_description"]
    assert "x" * 100 not in answer["error_description"]  # not echoed back either
    assert await stored_clients(oauth.http) == before
    assert refusals(oauth.http, "size") == 1


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("client_name", "n" * 201, "invalid_client_metadata"),
        ("redirect_uris", [f"https://a.example/{i}" for i in range(11)], "invalid_redirect_uri"),
        ("redirect_uris", ["https://a.example/" + "p" * 2000], "invalid_redirect_uri"),
        ("client_uri", "https://a.example/" + "c" * 1000, "invalid_client_metadata"),
        ("logo_uri", "https://a.example/" + "l" * 1000, "invalid_client_metadata"),
        ("tos_uri", "https://a.example/" + "t" * 1000, "invalid_client_metadata"),
        ("policy_uri", "https://a.example/" + "p" * 1000, "invalid_client_metadata"),
        ("software_id", "s" * 201, "invalid_client_metadata"),
        ("software_version", "1" * 101, "invalid_client_metadata"),
        ("scope", "n8n:read " * 30, "invalid_client_metadata"),
        ("grant_types", ["authorization_code"] * 11, "invalid_client_metadata"),
        ("response_types", ["code"] * 11, "invalid_client_metadata"),
        ("token_endpoint_auth_method", "m" * 65, "invalid_client_metadata"),
        ("application_type", "w" * 65, "invalid_client_metadata"),
    ],
)
async def test_each_kept_field_over_its_bound_is_refused_naming_it(
    oauth: OAuth, field: str, value: Any, error: str
) -> None:
    resp = await oauth.http.post("/register", json={**GOOD, field: value})
    assert resp.status == 400, await resp.text()
    answer = await resp.json()
    assert answer["error"] == error
    assert answer["error_description"].startswith(field), answer
    assert refusals(oauth.http, "size") == 1


async def test_values_just_within_their_bounds_are_kept(oauth: OAuth) -> None:
    body = {
        "redirect_uris": [f"https://a.example/{i}" for i in range(10)],
        "client_name": "n" * 200,
        "logo_uri": "https://a.example/" + "l" * (1000 - 18),
        "software_id": "s" * 200,
        "software_version": "1" * 100,
    }
    resp = await oauth.http.post("/register", json=body)
    assert resp.status == 201, await resp.text()
    echoed = await resp.json()
    assert echoed["logo_uri"] == body["logo_uri"] and len(echoed["redirect_uris"]) == 10


@pytest.mark.parametrize("size", [16 * 1024 + 1, 40 * 1024])
async def test_the_document_as_a_whole_is_bounded(oauth: OAuth, size: int) -> None:
    """Even padding in a field that is dropped counts: the document is at most 16 KiB (a
    body beyond the service's 32 KiB request bound gets the same answer, not a 413)."""
    body = json.dumps({**GOOD, "jwks": {"k": ""}})
    padded = body.replace('"k": ""', '"k": "' + "p" * (size - len(body)) + '"').encode()
    assert len(padded) == size
    resp = await oauth.http.post(
        "/register", data=padded, headers={"Content-Type": "application/json"}
    )
    assert resp.status == 400
    answer = await resp.json()
    assert answer["error"] == "invalid_client_metadata"
    assert "at most 16384 bytes" in answer["error_description"]


async def test_fields_the_service_does_not_use_are_neither_stored_nor_echoed(
    oauth: OAuth,
) -> None:
    dropped = {
        "contacts": ["someone@example.com"],
        "jwks_uri": "https://a.example/jwks",
        "jwks": {"keys": []},
        "software_statement": "eyJ.x.y",
        "sector_identifier_uri": "https://a.example/s",
        "frobnicate": {"deep": [1, 2, 3]},
    }
    kept = {
        "client_uri": "https://a.example/",
        "logo_uri": "https://a.example/logo.png",
        "tos_uri": "https://a.example/tos",
        "policy_uri": "https://a.example/policy",
        "software_id": "4NRB1-0XZABZI9E6-5SM3R",
        "software_version": "2.1",
        "application_type": "native",
    }
    resp = await oauth.http.post("/register", json={**GOOD, **dropped, **kept})
    assert resp.status == 201, await resp.text()
    echoed = await resp.json()
    for name in dropped:
        assert name not in echoed
    for name, value in kept.items():
        assert echoed[name] == value
    stored = await oauth.pool.fetchval(
        "SELECT metadata::text FROM oauth_clients WHERE client_id = $1", echoed["client_id"]
    )
    assert json.loads(stored) == kept


@pytest.mark.parametrize("value", ["https://a.example/\x00", "https://a.example/\u202e", "a\tb"])
async def test_kept_information_with_invisible_characters_is_refused(
    oauth: OAuth, value: str
) -> None:
    resp = await oauth.http.post("/register", json={**GOOD, "client_uri": value})
    assert resp.status == 400
    answer = await resp.json()
    assert answer["error"] == "invalid_client_metadata"
    if "\x00" in value:  # bad input before it is a bad field (tests/hostile/test_bad_bytes.py)
        assert "NUL" in answer["error_description"]
    else:
        assert "client_uri" in answer["error_description"]


async def limited_apps(
    aiohttp_client: ClientFactory, make_config: Callable[..., Config], count: int, **env: str
) -> tuple[list[App], Config]:
    """`count` app instances sharing one database and one fresh Redis prefix."""
    cfg = make_config(REDIS_KEY_PREFIX=new_redis_prefix(), **env)
    return [await aiohttp_client(create_app(cfg)) for _ in range(count)], cfg


async def register(http: App, name: str = "Limited") -> Any:
    return await http.post("/register", json={**GOOD, "client_name": name})


async def test_burst_then_429_with_retry_after_across_two_instances(
    aiohttp_client: ClientFactory, make_config: Callable[..., Config]
) -> None:
    (a, b), _ = await limited_apps(
        aiohttp_client, make_config, 2, OAUTH_REGISTER_BURST="4", OAUTH_REGISTER_PER_HOUR="30"
    )
    # A refused registration (bad metadata) takes nothing from the budget.
    bad = await a.post("/register", json={"redirect_uris": ["http://evil.example/cb"]})
    assert bad.status == 400
    for http in (a, b, a, b):
        resp = await register(http)
        assert resp.status == 201, await resp.text()
    for http in (a, b):
        resp = await register(http)
        assert resp.status == 429
        assert resp.headers["Cache-Control"] == "no-store"
        answer = await resp.json()
        assert set(answer) == {"error", "error_description"}
        assert answer["error"] == "temporarily_unavailable"
        retry = int(resp.headers["Retry-After"])
        # 30 an hour: one every 120 s; the bucket was emptied moments ago.
        assert 100 <= retry <= 120, retry
        assert f"{retry} seconds" in answer["error_description"]
    assert refusals(a, "rate") == 1 and refusals(b, "rate") == 1


async def test_retry_after_is_when_the_next_registration_is_accepted(
    aiohttp_client: ClientFactory, make_config: Callable[..., Config]
) -> None:
    (a, b), _ = await limited_apps(
        aiohttp_client, make_config, 2, OAUTH_REGISTER_BURST="2", OAUTH_REGISTER_PER_HOUR="3600"
    )
    assert (await register(a)).status == 201
    assert (await register(b)).status == 201
    refused = await register(a)
    assert refused.status == 429
    retry = int(refused.headers["Retry-After"])
    assert retry == 1  # one token a second
    started = time.monotonic()
    await asyncio.sleep(retry + 0.05)
    accepted = await register(b)
    assert accepted.status == 201, await accepted.text()
    assert time.monotonic() - started < 10


async def test_without_redis_each_instance_keeps_its_own_share(
    aiohttp_client: ClientFactory, make_config: Callable[..., Config]
) -> None:
    """Redis down (a closed port): the limit still holds, per instance, with the share of
    ELOVA_EXPECTED_REPLICAS (burst 6 over 2 replicas: 3 each)."""
    (a,), _ = await limited_apps(
        aiohttp_client,
        make_config,
        1,
        REDIS_URL="redis://127.0.0.1:9/0",
        EXPECTED_REPLICAS="2",
        OAUTH_REGISTER_BURST="6",
        OAUTH_REGISTER_PER_HOUR="60",
    )
    for _ in range(3):
        resp = await register(a)
        assert resp.status == 201, await resp.text()
    refused = await register(a)
    assert refused.status == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 120


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("unknown", "unknown"),
    ],
)
def test_the_limit_counts_an_ipv6_host_by_its_64(address: str, key: str) -> None:
    assert address_key(address) == key
