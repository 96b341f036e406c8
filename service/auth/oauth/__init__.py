"""The OAuth 2.1 authorization server: metadata, registration, sign-in, the approval page,
the approvals page, the token and revocation endpoints. Modules: docs/architecture.md."""
