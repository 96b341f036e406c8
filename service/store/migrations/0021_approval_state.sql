-- The state of one approval as every request's authorization reads it: whether it still
-- backs tokens of its generation (revoked, expired), the scopes it grants, and its eligible
-- workspaces (those it lists that the account is still a member of) with the account's role
-- in each, ordered by workspace id. One definition for the bearer check and for the tool
-- statements that confirm their caller themselves (service/store/reads/approvals.py).
--
-- LANGUAGE sql, STABLE and not STRICT: PostgreSQL inlines the body into the statement that
-- calls it, so `FROM approval_state($1)` plans exactly as the SELECT written in its place.
CREATE FUNCTION approval_state(approval uuid)
RETURNS TABLE (
    account_id    uuid,
    client_id     text,
    generation    integer,
    scopes        text[],
    revoked       boolean,
    expired       boolean,
    workspace_ids uuid[],
    roles         text[]
)
LANGUAGE sql STABLE PARALLEL SAFE AS $approval_state$
    SELECT a.account_id, a.client_id, a.generation, a.scopes,
           a.revoked_at IS NOT NULL,
           a.expires_at <= now(),
           coalesce(array_agg(m.workspace_id ORDER BY m.workspace_id)
                    FILTER (WHERE m.workspace_id IS NOT NULL), '{}'),
           coalesce(array_agg(m.role ORDER BY m.workspace_id)
                    FILTER (WHERE m.workspace_id IS NOT NULL), '{}')
      FROM approvals a
      LEFT JOIN approval_workspaces aw ON aw.approval_id = a.id
      LEFT JOIN memberships m ON m.account_id = a.account_id AND m.workspace_id = aw.workspace_id
     WHERE a.id = approval
     GROUP BY a.id
$approval_state$;
