-- Enterprise-managed authorization (issue 55): the identity providers the operator trusts
-- to speak for the accounts of one email domain (`elova-mcp idp add`), the binding of an
-- IdP's subject to the account its first grant matched by email, and on each approval the
-- IdP it was granted through (null for one a person or the operator granted). `idp remove`
-- revokes with reason 'operator' (the operator ran it); its audit line names the issuer.
CREATE TABLE trusted_idps (
    issuer        text PRIMARY KEY CHECK (issuer LIKE 'https://%'),
    jwks_uri      text NOT NULL,
    domain        text NOT NULL,
    client_ids    text[] NOT NULL DEFAULT '{}',   -- empty: any client
    workspace_ids uuid[] NOT NULL DEFAULT '{}',   -- empty: all of the account's memberships
    expires       text NOT NULL DEFAULT '1d' CHECK (expires IN ('1d', '7d', '30d')),
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE idp_subjects (
    issuer     text NOT NULL REFERENCES trusted_idps (issuer) ON DELETE CASCADE,
    subject    text NOT NULL,
    account_id uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (issuer, subject)
);

ALTER TABLE approvals ADD COLUMN idp_issuer text;
-- reviewed: `idp remove` revokes by issuer; partial, so approvals granted by people (the
-- null rows) cost it nothing. approvals is small (at most 100 active per account) and a
-- plain build blocks only its writes within the runner's lock timeout.
CREATE INDEX approvals_idp_issuer ON approvals (idp_issuer) WHERE idp_issuer IS NOT NULL;

