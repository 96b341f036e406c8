-- Statistics and period pages read dated executions by chronology. For dated rows sort_at is
-- coalesce(startedAt, createdAt), so a period window is a range of this partial index, and
-- the first dated execution (where `all` buckets begin) is its first entry.
CREATE INDEX executions_dated_chronology ON executions (workspace_id, sort_at) WHERE dated;
-- undatedExecutions without reading the dated rows.
CREATE INDEX executions_undated ON executions (workspace_id) WHERE NOT dated;
