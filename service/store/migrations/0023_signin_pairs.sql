-- Failed sign-ins per (account, address) pair (service/auth/oauth/throttle.py): the pair is
-- slowed down progressively, and an account as a whole only when its failures come from
-- many addresses. Both keys are SHA-256 digests (no email address or IP is stored).
-- last_success_at marks a known address of the account: it is not held back when the
-- account as a whole is.
--
-- Expand only: signin_throttle stays, and keeps its address keys (the per-address limit
-- across accounts); the previous release's account keys in it are no longer read.
CREATE TABLE signin_pairs (
    account_key     bytea NOT NULL CHECK (octet_length(account_key) = 32),
    address_key     bytea NOT NULL CHECK (octet_length(address_key) = 32),
    failures        integer NOT NULL CHECK (failures >= 0),
    last_failure_at timestamptz,
    last_success_at timestamptz,
    PRIMARY KEY (account_key, address_key)
);

-- The distinct addresses an account failed from lately (the account-wide hold).
CREATE INDEX signin_pairs_account_failures ON signin_pairs (account_key, last_failure_at)
    WHERE failures > 0;

-- Pairs neither failed nor signed in from lately are forgotten a few at a time.
CREATE INDEX signin_pairs_last_seen ON signin_pairs (greatest(last_failure_at, last_success_at));
