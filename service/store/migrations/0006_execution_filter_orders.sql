-- Filtered execution pages at scale: an instance or workflow filter together with a status
-- (or `failed`, read as one ordered branch per status and merged) walks exactly the
-- matching rows in list order, so a rare status or a deep page costs what page 1 costs.
-- Without these the keyset index of the instance/workflow is read and the status filtered,
-- which for a rare status means reading most of an instance's executions for one page.
CREATE INDEX executions_instance_status_order
    ON executions (instance_id, status, sort_at DESC, id DESC);
CREATE INDEX executions_workflow_status_order
    ON executions (workflow_id, status, sort_at DESC, id DESC) WHERE workflow_id IS NOT NULL;
