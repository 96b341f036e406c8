"""Authorization: access tokens, the bearer check on /mcp, approvals, and the OAuth server
(oauth/). Modules: docs/architecture.md."""
