"""What on-call reads: structured logs, trace and request ids, Prometheus metrics
(metrics/) and OpenTelemetry traces (tracing/). Modules: docs/architecture.md."""
