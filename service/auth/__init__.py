"""Authorization: access tokens, the bearer check on /mcp, approvals, and the OAuth server:
its client registry (clients/), protocol endpoints (oauth/) and pages (pages/), whose
routes routes.py registers. Modules: docs/architecture.md."""
