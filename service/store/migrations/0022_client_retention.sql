-- Retention of unused clients (docs/decisions/oauth.md, "Registration bounds"): a
-- registered or metadata-document client that never completed an authorization is deleted
-- after ELOVA_OAUTH_UNUSED_CLIENT_RETENTION_HOURS. Expand only: two nullable columns and an
-- index; the previous release neither reads nor writes them and keeps working.

-- When an approval of this client was first granted (set in the approval's transaction);
-- NULL: never. A client with it set is never swept.
ALTER TABLE oauth_clients ADD COLUMN authorized_at timestamptz;
-- A metadata-document client: when its document was last fetched (retention counts from
-- here, so a document in use is not swept between fetches). NULL for other kinds.
ALTER TABLE oauth_clients ADD COLUMN document_fetched_at timestamptz;

UPDATE oauth_clients c
   SET authorized_at = a.first_approved
  FROM (SELECT client_id, min(created_at) AS first_approved FROM approvals GROUP BY client_id) a
 WHERE a.client_id = c.client_id AND c.authorized_at IS NULL;

-- The sweep's candidates, oldest first.
-- reviewed: oauth_clients holds registered clients only (bounded by the registration limit
-- and this retention; 100,000 rows index in about 0.1 s), and a plain build blocks only
-- writes to it (registrations), never reads, within the runner's 1 s lock timeout.
CREATE INDEX oauth_clients_unused ON oauth_clients ((coalesce(document_fetched_at, created_at)))
    WHERE authorized_at IS NULL AND kind IN ('dynamic', 'metadata');
