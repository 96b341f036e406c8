"""The OAuth 2.1 authorization server's protocol endpoints: metadata, registration, /token,
/revoke, authorization codes and requests, client authentication. Map: docs/architecture.md."""
