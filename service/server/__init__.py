"""The HTTP server around the app: the main listener and its connections, body reading,
refusal pacing, the access log, error answers, health and the drain; overload/ is load
shedding. Modules: docs/architecture.md."""
