"""Prometheus metrics: the families of one app's registry, their labels, the hot-path
updates, the `Metrics` interface and the /metrics listener. Modules: docs/architecture.md."""
