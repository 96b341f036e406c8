"""Whether traces are exported: the standard OTEL_* variables name an OTLP endpoint and do
not turn the SDK off (docs/operations.md, Tracing). The SDK reads the rest of its
variables itself (service/observability/tracing/provider.py)."""

from __future__ import annotations

from collections.abc import Mapping

# Any of these names where spans go; OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none
# turns tracing off whatever they say.
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def configured(env: Mapping[str, str]) -> bool:
    """Whether the OTEL_* variables of `env` ask for traces to be exported."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES)


TRUST_INCOMING = "ELOVA_TRACING_TRUST_INCOMING"


def trust_incoming(env: Mapping[str, str]) -> bool:
    """Whether a caller's sampled flag is honoured (ELOVA_TRACING_TRUST_INCOMING, default
    false: callers on the internet must not decide what is recorded)."""
    raw = env.get(TRUST_INCOMING, "false").strip().lower()
    if raw not in ("true", "false"):
        raise ValueError(f"{TRUST_INCOMING}: expected true or false, got {raw!r}")
    return raw == "true"
