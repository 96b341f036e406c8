"""The request's vocabulary: header names, route paths, request ids, the client's
address, the bad-bytes rule of text and a request's waits. Modules: docs/architecture.md."""
