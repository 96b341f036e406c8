-- Clients known by their Client ID Metadata Document: the client id is the document's https
-- URL, and the row (name, redirect URIs, scope) is refreshed from the document whenever it
-- is fetched again. Approvals, codes and refresh tokens reference it like any client.

ALTER TABLE oauth_clients DROP CONSTRAINT oauth_clients_kind_check;
ALTER TABLE oauth_clients ADD CONSTRAINT oauth_clients_kind_check
    CHECK (kind IN ('operator', 'dynamic', 'metadata'));
