"""OpenTelemetry traces, off unless OTEL_* name an endpoint (docs/decisions/tracing.md).
Modules: docs/architecture.md."""
