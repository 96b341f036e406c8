"""The request's vocabulary: header names, route paths, request ids, the client's
address and the bad-bytes rule of text. Modules: docs/architecture.md."""
