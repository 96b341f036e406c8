"""One setting: the value of an ELOVA_* variable, converted and checked, or a ConfigError
naming the variable. A section's field is one line, `name: T = setting(VARIABLE, convert,
default)`, its default written there once; `read_section` reads every such field."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from service.errors import ConfigError

T = TypeVar("T")
S = TypeVar("S")

_SETTING = "setting"


@dataclass(frozen=True)
class Setting(Generic[T]):
    """An ELOVA_* variable, how its text becomes a value, and the value when it is unset."""

    variable: str
    convert: Callable[[str], T]
    default: T

    def read(self, env: Mapping[str, str]) -> T:
        return parse(env, self.variable, self.convert, self.default)

    def read_or(self, env: Mapping[str, str], default: T) -> T:
        """The value, or `default` when unset: a default worked out from other settings."""
        return parse(env, self.variable, self.convert, default)

    def field(self, *, shown: bool = True) -> T:
        """This setting as the field of a section (a frozen dataclass); `shown=False` keeps a
        secret out of the section's repr."""
        result: T = dataclasses.field(default=self.default, repr=shown, metadata={_SETTING: self})
        return result


def setting(variable: str, convert: Callable[[str], T], default: T, *, shown: bool = True) -> T:
    """A section's field read from `variable`: `port: int = setting("ELOVA_PORT", ...)`."""
    return Setting(variable, convert, default).field(shown=shown)


def setting_of(section: type[Any], name: str) -> Setting[Any]:
    """The setting behind one field of a section."""
    found: Setting[Any] = next(
        f.metadata[_SETTING] for f in dataclasses.fields(section) if f.name == name
    )
    return found


def read_section(section: type[S], env: Mapping[str, str], **given: Any) -> S:
    """The section with every `setting` field read from `env`, in field order; `given`
    holds the fields its caller works out itself (a derived default, a check across
    fields), and the fields without a setting keep their defaults."""
    values = dict(given)
    for f in dataclasses.fields(section):  # type: ignore[arg-type]
        spec = f.metadata.get(_SETTING)
        if spec is not None and f.name not in given:
            values[f.name] = spec.read(env)
    return section(**values)


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
