-- OAuth authorization server: sign-in sessions for the approval page, authorization codes,
-- and the sign-in throttle. Every value that works as a credential (session cookie,
-- authorization code) is stored only as its SHA-256, like refresh tokens.

CREATE TABLE signin_sessions (
    session_hash bytea PRIMARY KEY CHECK (octet_length(session_hash) = 32),
    account_id   uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    -- Sent in every form of this session and compared on POST (CSRF).
    csrf_token   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),   -- idle timeout counts from here
    expires_at   timestamptz NOT NULL                  -- absolute end (created_at + 30 days)
);
CREATE INDEX signin_sessions_account ON signin_sessions (account_id);
CREATE INDEX signin_sessions_expiry ON signin_sessions (expires_at);

CREATE TABLE authorization_codes (
    code_hash      bytea PRIMARY KEY CHECK (octet_length(code_hash) = 32),
    client_id      text NOT NULL REFERENCES oauth_clients (client_id) ON DELETE CASCADE,
    approval_id    uuid NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
    generation     integer NOT NULL,   -- the approval generation the code was issued for
    redirect_uri   text NOT NULL,
    code_challenge text NOT NULL,      -- PKCE S256 challenge (base64url, 43 characters)
    resource       text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL,
    used_at        timestamptz
);
CREATE INDEX authorization_codes_expiry ON authorization_codes (expires_at);
CREATE INDEX authorization_codes_approval ON authorization_codes (approval_id);

-- Failed sign-ins per key (SHA-256 of "account:<lower email>" or "address:<ip>") in a
-- fixed window; kept in PostgreSQL so the throttle holds across replicas.
CREATE TABLE signin_throttle (
    throttle_key bytea PRIMARY KEY CHECK (octet_length(throttle_key) = 32),
    failures     integer NOT NULL CHECK (failures >= 1),
    window_start timestamptz NOT NULL
);

-- A reused authorization code revokes the approval it was issued for.
ALTER TABLE approvals DROP CONSTRAINT approvals_revoked_reason_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_revoked_reason_check
    CHECK (revoked_reason IN ('operator', 'user', 'refresh_reuse', 'client', 'code_reuse'));
