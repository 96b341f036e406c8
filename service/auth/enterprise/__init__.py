"""Enterprise-managed authorization: trusted identity providers (operator data), their key
sets, and the JWT bearer grant of an ID-JAG at /token (docs/architecture.md)."""
