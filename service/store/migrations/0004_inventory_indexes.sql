-- Inventory read shapes not served by 0001: an instance's workflows of every lifecycle in
-- name order (get_many_workflows with instanceId and lifecycle "all").
CREATE INDEX workflows_instance_name_order ON workflows (instance_id, name, id);
