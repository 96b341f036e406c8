"""Sign-in behind a proxy, against the running app: the client address comes from the
forwarding header only when the peer is a trusted proxy (127.0.0.0/8 here: the test client
connects from loopback), and the failed sign-in throttle cannot be turned against the
person it protects: a stranger's failures slow the stranger, 30 failures from one client do
not lock out the others behind the same proxy, and only failures from many addresses hold
an account. What an attacker sees never says whether an account exists."""

from __future__ import annotations

import io
import json
import secrets
import statistics
import time
import uuid
from collections.abc import Callable

import pytest
from aiohttp import ClientResponse
from multidict import CIMultiDict

from service.app import create_app
from service.config import Config
from tests.auth.browser_flow import OAuth
from tests.auth.flow import hidden, seed_account
from tests.auth.helpers import ClientFactory

Headers = CIMultiDict[str]


def _an_address() -> str:
    """A fresh client address (198.18.0.0/15, the benchmarking range), one a test."""
    n = secrets.randbelow(2**17 - 2) + 1
    return f"198.{18 + (n >> 16)}.{(n >> 8) & 255}.{n & 255}"


def _from(address: str) -> Headers:
    return CIMultiDict({"X-Forwarded-For": address})


async def _proxied(aiohttp_client: ClientFactory, cfg: Config) -> OAuth:
    return OAuth(await aiohttp_client(create_app(cfg)), cfg)


@pytest.fixture
def behind_proxy(make_config: Callable[..., Config]) -> Config:
    return make_config(TRUSTED_PROXIES="127.0.0.0/8,::1/128")


@pytest.fixture
async def proxied(aiohttp_client: ClientFactory, behind_proxy: Config) -> OAuth:
    return await _proxied(aiohttp_client, behind_proxy)


async def _signin(oauth: OAuth, email: str, password: str, headers: Headers) -> ClientResponse:
    page = await oauth.http.get("/signin", headers=headers)
    assert page.status == 200
    fields = dict(hidden(await page.text()))
    return await oauth.http.post(
        "/signin",
        data={**fields, "email": email, "password": password},
        headers=headers,
        allow_redirects=False,
    )


def _clients(lines: io.StringIO, path: str) -> list[str]:
    return [
        line["client"]
        for line in map(json.loads, lines.getvalue().splitlines())
        if line.get("path") == path
    ]


async def _client_seen(oauth: OAuth, lines: io.StringIO, headers: Headers) -> str:
    resp = await oauth.http.get("/livez", headers=headers)
    assert resp.status == 200
    return _clients(lines, "/livez")[-1]


async def test_forwarding_headers_are_read_only_from_a_trusted_peer(
    aiohttp_client: ClientFactory, make_config: Callable[..., Config], access_lines: io.StringIO
) -> None:
    trusting = await _proxied(aiohttp_client, make_config(TRUSTED_PROXIES="127.0.0.0/8"))
    spoofed = _from("203.0.113.5")
    assert await _client_seen(trusting, access_lines, spoofed) == "203.0.113.5"
    for untrusting in (make_config(), make_config(TRUSTED_PROXIES="10.0.0.0/8")):
        plain = await _proxied(aiohttp_client, untrusting)
        assert await _client_seen(plain, access_lines, spoofed) == "127.0.0.1"
        forwarded = CIMultiDict({"Forwarded": "for=203.0.113.5"})
        assert await _client_seen(plain, access_lines, forwarded) == "127.0.0.1"


@pytest.mark.parametrize(
    ("header", "lines", "client"),
    [
        ("x-forwarded-for", [("X-Forwarded-For", "6.6.6.6, 203.0.113.7")], "203.0.113.7"),
        (
            "x-forwarded-for",
            [("X-Forwarded-For", "6.6.6.6"), ("x-forwarded-for", "203.0.113.7, 127.0.0.9")],
            "203.0.113.7",
        ),
        ("x-forwarded-for", [("X-FORWARDED-FOR", "[2001:DB8::1]:4711")], "2001:db8::1"),
        ("x-forwarded-for", [("X-Forwarded-For", "6.6.6.6, junk")], "127.0.0.1"),
        ("x-forwarded-for", [("Forwarded", "for=203.0.113.7")], "127.0.0.1"),
        ("forwarded", [("Forwarded", 'for="[2001:db8::1]:4711";proto=https')], "2001:db8::1"),
        ("forwarded", [("FORWARDED", 'For=6.6.6.6, FOR="203.0.113.7:80"')], "203.0.113.7"),
        ("forwarded", [("Forwarded", "for=6.6.6.6"), ("Forwarded", "for=unknown")], "127.0.0.1"),
        ("forwarded", [("X-Forwarded-For", "203.0.113.7")], "127.0.0.1"),
    ],
    ids=[
        "spoofed-left",
        "two-lines-and-a-trusted-hop",
        "upper-case-bracketed-ipv6",
        "garbage",
        "the-other-header",
        "forwarded-ipv6",
        "forwarded-mixed-case",
        "forwarded-unknown",
        "xff-when-forwarded-is-read",
    ],
)
async def test_other_proxies_header_forms(
    aiohttp_client: ClientFactory,
    make_config: Callable[..., Config],
    access_lines: io.StringIO,
    header: str,
    lines: list[tuple[str, str]],
    client: str,
) -> None:
    cfg = make_config(TRUSTED_PROXIES="127.0.0.0/8", TRUSTED_PROXY_HEADER=header)
    oauth = await _proxied(aiohttp_client, cfg)
    assert await _client_seen(oauth, access_lines, CIMultiDict(lines)) == client


async def test_thirty_failures_from_one_client_do_not_lock_out_the_others(
    proxied: OAuth, access_lines: io.StringIO
) -> None:
    owner = await seed_account(proxied.pool, workspaces=1)
    sprayer, neighbour = _from(_an_address()), _from(_an_address())
    for i in range(proxied.cfg.signin_throttle.address_failures):
        email = f"guess{i}-{uuid.uuid4().hex[:6]}@example.test"
        assert (await _signin(proxied, email, "nope", sprayer)).status == 401
    held = await _signin(proxied, owner.email, owner.password, sprayer)
    assert held.status == 429  # the sprayer's address is held, for every account
    ok = await _signin(proxied, owner.email, owner.password, neighbour)
    assert ok.status == 303
    assert _clients(access_lines, "/signin")[-1] == neighbour["X-Forwarded-For"]


def _a_slash_64() -> str:
    """A fresh IPv6 /64 (2001:db8::/32, the documentation range), one a test."""
    return f"2001:db8:{secrets.randbelow(2**16):x}:{secrets.randbelow(2**16):x}:"


async def test_an_ipv6_slash_64_is_held_as_one_address(proxied: OAuth) -> None:
    """Issue 42, item 7: a sprayer rotating addresses inside one /64 is held as one address
    (as registration counts it); another /64 is not."""
    owner = await seed_account(proxied.pool, workspaces=1)
    block = _a_slash_64()
    for i in range(proxied.cfg.signin_throttle.address_failures):
        host = f"{i:x}:{secrets.randbelow(2**16):x}:{secrets.randbelow(2**16):x}:1"
        rotated = _from(block + host)
        email = f"guess{i}-{uuid.uuid4().hex[:6]}@example.test"
        assert (await _signin(proxied, email, "nope", rotated)).status == 401
    held = await _signin(proxied, owner.email, owner.password, _from(f"{block}ffff::1"))
    assert held.status == 429  # a new address of the same /64: held
    ok = await _signin(proxied, owner.email, owner.password, _from(f"{_a_slash_64()}:1"))
    assert ok.status == 303


async def test_a_strangers_wrong_passwords_do_not_lock_out_the_owner(proxied: OAuth) -> None:
    owner = await seed_account(proxied.pool, workspaces=1)
    settings = proxied.cfg.signin_throttle
    # Three strangers, 12 wrong passwords: once 5 from anywhere held the owner for 15 minutes.
    for _ in range(3):
        stranger = _from(_an_address())
        for _ in range(settings.free_failures + 1):
            assert (await _signin(proxied, owner.email, "guess", stranger)).status == 401
        assert (await _signin(proxied, owner.email, owner.password, stranger)).status == 429
    signed = await _signin(proxied, owner.email, owner.password, _from(_an_address()))
    assert signed.status == 303


async def test_the_pair_slows_down_progressively_and_the_page_says_when(
    proxied: OAuth,
) -> None:
    owner = await seed_account(proxied.pool, workspaces=1)
    settings, me = proxied.cfg.signin_throttle, _from(_an_address())
    for _ in range(settings.free_failures):
        assert (await _signin(proxied, owner.email, "typo", me)).status == 401
    waits = []
    for n in range(4):
        assert (await _signin(proxied, owner.email, "typo", me)).status == 401
        held = await _signin(proxied, owner.email, owner.password, me)
        assert held.status == 429
        wait = int(held.headers["Retry-After"])
        expected = settings.first_delay_seconds * 2**n
        assert expected - 1 <= wait <= expected
        unit = "second" if wait == 1 else "seconds"
        assert f"Try again in {wait} {unit}." in await held.text()
        waits.append(wait)
        # The wait passes (another replica reads the same rows).
        await proxied.pool.execute(
            "UPDATE signin_pairs SET last_failure_at = last_failure_at - $1 * interval '1 second'",
            float(wait),
        )
    assert waits == sorted(waits) and waits[-1] >= 4 * waits[0]
    # Capped: however many failures, the pair waits at most the longest delay.
    await proxied.pool.execute("UPDATE signin_pairs SET failures = 1000, last_failure_at = now()")
    held = await _signin(proxied, owner.email, owner.password, me)
    longest = int(settings.longest_delay_seconds)
    assert longest - 2 <= int(held.headers["Retry-After"]) <= longest
    assert f"Try again in {longest // 60} minutes." in await held.text()
    await proxied.pool.execute("UPDATE signin_pairs SET last_failure_at = now() - interval '1 day'")
    assert (await _signin(proxied, owner.email, owner.password, me)).status == 303


async def test_failures_from_many_addresses_hold_the_account_but_not_its_known_address(
    proxied: OAuth,
) -> None:
    owner = await seed_account(proxied.pool, workspaces=1)
    home = _from(_an_address())
    assert (await _signin(proxied, owner.email, owner.password, home)).status == 303
    for _ in range(proxied.cfg.signin_throttle.account_addresses):
        bot = _from(_an_address())
        assert (await _signin(proxied, owner.email, "guess", bot)).status == 401
    held = await _signin(proxied, owner.email, owner.password, _from(_an_address()))
    assert held.status == 429
    assert 0 < int(held.headers["Retry-After"]) <= proxied.cfg.signin_throttle.window_seconds
    assert (await _signin(proxied, owner.email, owner.password, home)).status == 303
    # The window passes: the account is no longer held.
    await proxied.pool.execute(
        "UPDATE signin_pairs SET last_failure_at = now() - interval '16 minutes'"
        " WHERE last_failure_at IS NOT NULL"
    )
    assert (await _signin(proxied, owner.email, owner.password, _from(_an_address()))).status == 303


async def test_sign_in_never_says_whether_an_account_exists(proxied: OAuth) -> None:
    owner = await seed_account(proxied.pool, workspaces=1)
    nobody = f"nobody-{uuid.uuid4().hex[:8]}@example.test"
    settings = proxied.cfg.signin_throttle

    async def attempt(email: str) -> tuple[int, str, float]:
        start = time.perf_counter()
        resp = await _signin(proxied, email, "wrong password", _from(_an_address()))
        seconds = time.perf_counter() - start
        text = (await resp.text()).replace(email, "EMAIL")
        return resp.status, text[text.index("<main") :], seconds

    known, unknown = [], []
    for _ in range(8):
        known.append(await attempt(owner.email))
        unknown.append(await attempt(nobody))
    # The same page, whether the account exists (the form's CSRF token aside).
    assert {(s, _without_csrf(t)) for s, t, _ in known} == {
        (s, _without_csrf(t)) for s, t, _ in unknown
    }
    # The same time, within the noise of a shared machine (a real scrypt each time).
    fast, slow = sorted(
        [statistics.median(x[2] for x in known), statistics.median(x[2] for x in unknown)]
    )
    assert slow - fast < max(0.5 * fast, 0.05), (fast, slow)
    # And the same holds: failures of an unknown account hold it like a known one.
    for email in (owner.email, nobody):
        me = _from(_an_address())
        for _ in range(settings.free_failures + 1):
            assert (await _signin(proxied, email, "wrong", me)).status == 401
        held = await _signin(proxied, email, "wrong", me)
        assert held.status == 429 and held.headers["Retry-After"] == str(
            int(settings.first_delay_seconds)
        )


def _without_csrf(html: str) -> str:
    return "\n".join(line for line in html.splitlines() if 'name="csrf"' not in line)


async def test_address_windows_that_ended_long_ago_are_swept(proxied: OAuth) -> None:
    """Issue 42: signin_throttle was never swept. A failure deletes windows that ended more
    than a day ago (a few at a time), never a current one."""
    stale = [secrets.token_bytes(32) for _ in range(3)]
    current = secrets.token_bytes(32)
    await proxied.pool.executemany(
        "INSERT INTO signin_throttle (throttle_key, failures, window_start)"
        " VALUES ($1, 7, now() - interval '3 days')",
        [(key,) for key in stale],
    )
    await proxied.pool.execute(
        "INSERT INTO signin_throttle (throttle_key, failures, window_start) VALUES ($1, 7, now())",
        current,
    )
    email = f"nobody-{uuid.uuid4().hex[:6]}@example.test"
    assert (await _signin(proxied, email, "nope", _from(_an_address()))).status == 401
    left = await proxied.pool.fetch(
        "SELECT throttle_key FROM signin_throttle WHERE throttle_key = ANY($1::bytea[])",
        [*stale, current],
    )
    assert [row["throttle_key"] for row in left] == [current]
