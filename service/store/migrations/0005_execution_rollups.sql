-- Statistics rollups (get_execution_stats without scanning every execution), maintained by
-- the load paths only (service/store/rollups.py): the snapshot loader applies the difference
-- of each upsert (old contribution out, new in), bulk writers call rebuild_rollups.
--
-- A slot is the 15-minute span [slot, slot + 15 min) of chronology time (sort_at of dated
-- rows). Every UTC offset in use today is a multiple of 15 minutes (+05:45, +12:45), so local
-- midnights fall on slot boundaries and a window or bucket is a whole number of slots plus
-- the partial slot at asOf. Undated executions have the slot '-infinity'; rows dated after
-- asOf stay in their own (future) slots: `all` totals count them, buckets never reach them.
-- The day table holds the same sums per UTC day (slot = its midnight), so long ranges read
-- a day row instead of 96 slot rows; the ends of a range that are not whole UTC days are
-- read from the 15-minute table.
--
-- Columns are sums over the executions of the key: `failed` = error + crashed; `priced`
-- = cost present; `priced_complete` = cost present and costCoverage.state 'complete';
-- `cost_sum` = exact numeric sum of the priced amounts (meaningful when priced > 0);
-- cc_* = sums of costCoverage counters (an execution without costCoverage adds 0);
-- `mm_rows` = executions carrying missingMappingObservations, `mm_sum` their sum.

CREATE TABLE execution_rollups (
    workspace_id    uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    instance_id     uuid NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    slot            timestamptz NOT NULL,
    executions      bigint NOT NULL,
    success         bigint NOT NULL,
    failed          bigint NOT NULL,
    priced          bigint NOT NULL,
    priced_complete bigint NOT NULL,
    cost_sum        numeric NOT NULL,
    cc_priced       numeric NOT NULL,
    cc_unresolved   numeric NOT NULL,
    cc_excluded     numeric NOT NULL,
    cc_observations numeric NOT NULL,
    mm_rows         bigint NOT NULL,
    mm_sum          numeric NOT NULL,
    PRIMARY KEY (workspace_id, slot, instance_id)
);
-- An instance filter on statistics (not offered today) reads its own range.
CREATE INDEX execution_rollups_instance ON execution_rollups (instance_id, slot);

CREATE TABLE execution_rollups_daily (LIKE execution_rollups INCLUDING ALL);
ALTER TABLE execution_rollups_daily
    ADD FOREIGN KEY (workspace_id) REFERENCES workspaces (id) ON DELETE CASCADE,
    ADD FOREIGN KEY (instance_id) REFERENCES instances (id) ON DELETE CASCADE;

-- Executions already retained when this migration runs.
INSERT INTO execution_rollups
SELECT workspace_id, instance_id,
       CASE WHEN dated THEN date_bin('15 minutes', sort_at, '2000-01-01 00:00:00+00')
            ELSE '-infinity' END,
       count(*),
       count(*) FILTER (WHERE status = 'success'),
       count(*) FILTER (WHERE status IN ('error', 'crashed')),
       count(*) FILTER (WHERE cost_state = 2),
       count(*) FILTER (WHERE cost_state = 2 AND cc_state = 'complete'),
       coalesce(sum(cost_amount) FILTER (WHERE cost_state = 2), 0),
       coalesce(sum(cc_priced), 0), coalesce(sum(cc_unresolved), 0),
       coalesce(sum(cc_excluded), 0), coalesce(sum(cc_observations), 0),
       count(cc_missing_mapping), coalesce(sum(cc_missing_mapping), 0)
  FROM executions
 GROUP BY 1, 2, 3;

INSERT INTO execution_rollups_daily
SELECT workspace_id, instance_id,
       CASE WHEN slot = '-infinity' THEN slot
            ELSE date_bin('1 day', slot, '2000-01-01 00:00:00+00') END,
       sum(executions), sum(success), sum(failed), sum(priced), sum(priced_complete),
       sum(cost_sum), sum(cc_priced), sum(cc_unresolved), sum(cc_excluded), sum(cc_observations),
       sum(mm_rows), sum(mm_sum)
  FROM execution_rollups
 GROUP BY 1, 2, 3;
