-- Authorization: OAuth clients, approvals (one account's consent for one client), the
-- workspaces each approval grants, and refresh tokens (stored only as SHA-256 hashes).
-- The bearer check on every MCP call reads approvals ⋈ approval_workspaces ⋈ memberships
-- by approval id; the indexes below serve that query and the per-account approval cap.

CREATE TABLE oauth_clients (
    client_id                  text PRIMARY KEY,
    client_name                text NOT NULL,
    redirect_uris              text[] NOT NULL DEFAULT '{}',
    -- operator: made by `elova-mcp approve`; dynamic: registered through RFC 7591.
    kind                       text NOT NULL CHECK (kind IN ('operator', 'dynamic')),
    token_endpoint_auth_method text NOT NULL DEFAULT 'none'
        CHECK (token_endpoint_auth_method IN ('none', 'client_secret_basic', 'client_secret_post')),
    client_secret_hash         bytea,          -- SHA-256 of the secret, confidential clients only
    grant_types                text[] NOT NULL DEFAULT '{authorization_code,refresh_token}',
    response_types             text[] NOT NULL DEFAULT '{code}',
    scope                      text,           -- the scope the client registered, if any
    metadata                   jsonb NOT NULL DEFAULT '{}',  -- other RFC 7591 fields as sent
    created_at                 timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE approvals (
    id             uuid PRIMARY KEY,
    account_id     uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    client_id      text NOT NULL REFERENCES oauth_clients (client_id) ON DELETE CASCADE,
    -- Incremented by every re-approval: tokens and cursors of an older generation are dead.
    generation     integer NOT NULL DEFAULT 1 CHECK (generation >= 1),
    scopes         text[] NOT NULL CHECK (
        cardinality(scopes) >= 1 AND scopes <@ ARRAY['workspaces:read', 'n8n:read']::text[]
    ),
    expires_at     timestamptz NOT NULL,
    revoked_at     timestamptz,
    revoked_reason text CHECK (revoked_reason IN ('operator', 'user', 'refresh_reuse', 'client')),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (account_id, client_id)
);
-- The 100-active-approvals cap counts an account's unrevoked approvals by expiry.
CREATE INDEX approvals_account_active ON approvals (account_id, expires_at)
    WHERE revoked_at IS NULL;
CREATE INDEX approvals_client ON approvals (client_id);

CREATE TABLE approval_workspaces (
    approval_id  uuid NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    PRIMARY KEY (approval_id, workspace_id)
);
CREATE INDEX approval_workspaces_workspace ON approval_workspaces (workspace_id);

CREATE TABLE refresh_tokens (
    token_hash  bytea PRIMARY KEY CHECK (octet_length(token_hash) = 32),  -- SHA-256 of the token
    approval_id uuid NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
    generation  integer NOT NULL,
    issued_at   timestamptz NOT NULL DEFAULT now(),
    used_at     timestamptz,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX refresh_tokens_approval ON refresh_tokens (approval_id, generation);
CREATE INDEX refresh_tokens_expiry ON refresh_tokens (expires_at);
