"""Reading one setting: the value of an ELOVA_* variable, converted and checked, or a
ConfigError naming the variable. Every section of the configuration reads through these."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from service.errors import ConfigError

T = TypeVar("T")


def value_of(env: Mapping[str, str], name: str) -> str:
    """The setting's value, stripped; "" when unset. Set but empty is an error, not "unset":
    `ELOVA_PORT=` is a mistake (a template that lost its value), and a silent default would
    hide it (docs/decisions/ops.md)."""
    if name not in env:
        return ""
    value = env[name].strip()
    if not value:
        raise ConfigError(
            f"{name} is set but empty; give it a value, or unset it to use the default"
        )
    return value


def text(env: Mapping[str, str], name: str, default: str) -> str:
    return value_of(env, name) or default


def parse(env: Mapping[str, str], name: str, conv: Callable[[str], T], default: T) -> T:
    raw = value_of(env, name)
    if not raw:
        return default
    try:
        return conv(raw)
    except (ValueError, TypeError) as err:
        reason = str(err)
        if reason.startswith(("invalid literal", "could not convert")):
            reason = f"expected a number, got {raw!r}"  # int()/float()'s own words
        raise ConfigError(f"{name} is malformed: {reason}") from err


def required(env: Mapping[str, str], name: str, conv: Callable[[str], T]) -> T:
    raw = value_of(env, name)
    if not raw:
        raise ConfigError(f"{name} is required but not set")
    value = parse(env, name, conv, None)  # raw is set: the converter's error names `name`
    assert value is not None
    return value


def positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise ValueError(f"expected a whole number >= 1, got {raw!r}")
    return value


def non_negative_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError(f"expected a whole number >= 0, got {raw!r}")
    return value


def positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(f"expected a positive number of seconds, got {raw!r}")
    return value


def millis(raw: str) -> float:
    value = int(raw)
    if not 1 <= value <= 60_000:
        raise ValueError(f"expected milliseconds from 1 to 60000, got {raw!r}")
    return value / 1000


def non_negative_float(raw: str) -> float:
    value = float(raw)
    if not 0 <= value < float("inf"):
        raise ValueError(f"expected a number of seconds >= 0, got {raw!r}")
    return value


def tcp_port(raw: str) -> int:
    value = int(raw)
    if not 0 <= value <= 65535:
        raise ValueError(f"not a TCP port: {raw!r}")
    return value


def flag(raw: str) -> bool:
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise ValueError("must be true or false")
