"""Who may register and sign in: dynamic registration's limit and the retention of unused
clients, and the failed sign-in throttle (docs/decisions/oauth.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from service.errors import ConfigError
from service.settings.variables import positive_float, positive_int, read_section, setting


@dataclass(frozen=True)
class Registration:
    """Dynamic registration's limit per client address (a token bucket: `burst` at once,
    refilled at `per_hour`), and how long a client that never completed an authorization
    is kept (`unused_retention_hours`; swept every `sweep_seconds` by each replica)."""

    burst: int = setting("ELOVA_OAUTH_REGISTER_BURST", positive_int, 10)
    per_hour: int = setting("ELOVA_OAUTH_REGISTER_PER_HOUR", positive_int, 30)
    unused_retention_hours: int = setting(
        "ELOVA_OAUTH_UNUSED_CLIENT_RETENTION_HOURS", positive_int, 168
    )
    sweep_seconds: float = setting("ELOVA_OAUTH_CLIENT_SWEEP_SECONDS", positive_float, 600.0)


def read_registration(env: Mapping[str, str]) -> Registration:
    return read_section(Registration, env)


@dataclass(frozen=True)
class SigninThrottle:
    """Failed sign-ins (service/auth/pages/signin_throttle.py). An (account, address) pair may fail
    `free_failures` times; each further failure makes its next attempt wait, from
    `first_delay_seconds` doubling up to `longest_delay_seconds`. An account is held for
    everyone but its known addresses once failures within `window_seconds` come from
    `account_addresses` distinct addresses; an address, for every account, after
    `address_failures` failures within the window."""

    free_failures: int = setting("ELOVA_SIGNIN_FREE_FAILURES", positive_int, 3)
    first_delay_seconds: float = setting("ELOVA_SIGNIN_FIRST_DELAY_SECONDS", positive_float, 2.0)
    longest_delay_seconds: float = setting(
        "ELOVA_SIGNIN_LONGEST_DELAY_SECONDS", positive_float, 900.0
    )
    window_seconds: float = setting("ELOVA_SIGNIN_WINDOW_SECONDS", positive_float, 900.0)
    account_addresses: int = setting("ELOVA_SIGNIN_ACCOUNT_ADDRESSES", positive_int, 10)
    address_failures: int = setting("ELOVA_SIGNIN_ADDRESS_FAILURES", positive_int, 30)


def read_signin_throttle(env: Mapping[str, str]) -> SigninThrottle:
    settings = read_section(SigninThrottle, env)
    if settings.longest_delay_seconds < settings.first_delay_seconds:
        raise ConfigError(
            "ELOVA_SIGNIN_LONGEST_DELAY_SECONDS is shorter than ELOVA_SIGNIN_FIRST_DELAY_SECONDS"
        )
    return settings
