-- MCP sessions (protocol revisions 2025-06-18 and 2025-11-25) ended by DELETE.
-- Session ids are self-verifying (HMAC, expiry inside), so only terminations are stored:
-- every replica checks this table, and a terminated id is 404 everywhere. Rows are kept
-- until the id would have expired anyway, then deleted.
CREATE TABLE mcp_terminated_sessions (
    session_digest bytea PRIMARY KEY,
    expires_at     timestamptz NOT NULL
);
CREATE INDEX mcp_terminated_sessions_expiry ON mcp_terminated_sessions (expires_at);
