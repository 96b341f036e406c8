"""Load shedding: the overload state, the in-flight limit, the 503 and its metrics
(docs/decisions/floods.md). Modules: docs/architecture.md."""
