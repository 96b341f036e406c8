-- Period pages (get_many_executions with today/7d/30d) walk dated executions in list order;
-- with this index undated rows (which sort by observedAt) are never read and skipped. It
-- also serves the statistics' window ranges and first dated execution, so it replaces
-- 0007's executions_dated_chronology.
CREATE INDEX executions_dated_order ON executions (workspace_id, sort_at DESC, id DESC) WHERE dated;
DROP INDEX executions_dated_chronology;
