-- Retained records: what the collector writes and the nine tools read (SEMANTICS §1).
-- Names are stored whole (already sanitized by the loader) and shortened on read.
-- Text compared or sorted by name uses COLLATE "C": UTF-8 byte order is code-point order.
-- "Absent" and "null" stay distinct for optional snapshot fields: a *_known flag (or a
-- state column) records whether the field was present at all.

CREATE TABLE accounts (
    id            uuid PRIMARY KEY,
    email         text NOT NULL,
    name          text NOT NULL,
    password_hash text,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX accounts_email_key ON accounts (lower(email));

CREATE TABLE workspaces (
    id                              uuid PRIMARY KEY,
    name                            text COLLATE "C" NOT NULL,
    time_zone                       text NOT NULL,
    read_generation                 integer NOT NULL DEFAULT 1,
    execution_poll_interval_seconds integer NOT NULL DEFAULT 300
        CHECK (execution_poll_interval_seconds BETWEEN 1 AND 86400)
);
CREATE INDEX workspaces_name_order ON workspaces (name, id);

CREATE TABLE memberships (
    account_id   uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    role         text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    PRIMARY KEY (account_id, workspace_id)
);
CREATE INDEX memberships_workspace ON memberships (workspace_id);

CREATE TABLE instances (
    id                           uuid PRIMARY KEY,
    workspace_id                 uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    name                         text COLLATE "C" NOT NULL,
    status                       text NOT NULL CHECK (status IN ('pending', 'connected', 'error')),
    auto_sync_enabled            boolean NOT NULL,
    workflow_interval_minutes    integer NOT NULL CHECK (workflow_interval_minutes BETWEEN 1 AND 10080),
    last_sync_at                 timestamptz,
    last_workflow_sync_at        timestamptz,
    last_execution_sync_at       timestamptz,
    history_complete             boolean NOT NULL,
    workflow_inventory_truncated boolean NOT NULL DEFAULT false,
    sync_pending                 boolean NOT NULL,
    sync_scope                   text,
    sync_status                  text,
    sync_error_code              text,
    sync_last_attempt_at         timestamptz
);
CREATE INDEX instances_workspace_order ON instances (workspace_id, name, id);

CREATE TABLE sync_jobs (
    id           uuid PRIMARY KEY,
    instance_id  uuid NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    scope        text NOT NULL,
    trigger      text NOT NULL,
    status       text NOT NULL,
    created_at   timestamptz NOT NULL,
    finished_at  timestamptz,
    error_code   text
);
CREATE INDEX sync_jobs_recent ON sync_jobs (instance_id, created_at DESC, id DESC);

CREATE TABLE workflows (
    id                       uuid PRIMARY KEY,
    workspace_id             uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    instance_id              uuid NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    name                     text COLLATE "C" NOT NULL,
    source_id                text NOT NULL,
    active                   boolean NOT NULL,
    tracked                  boolean NOT NULL,
    present                  boolean NOT NULL,
    archived_known           boolean NOT NULL DEFAULT false,  -- `archived` present in the snapshot
    archived                 boolean,
    definition_available     boolean,                         -- null: absent in the snapshot
    definition_removed_known boolean NOT NULL DEFAULT false,
    definition_removed_at    timestamptz,
    updated_at               timestamptz,
    observed_at              timestamptz NOT NULL,
    node_count               integer NOT NULL,
    nodes                    jsonb NOT NULL,                  -- every stored node, stored order
    nodes_inventory          text NOT NULL,                   -- bounded prefix, compact JSON (load-time)
    nodes_truncated          boolean NOT NULL,
    is_current               boolean GENERATED ALWAYS AS (
        present AND archived IS DISTINCT FROM true AND definition_available IS DISTINCT FROM false
    ) STORED
);
CREATE INDEX workflows_order ON workflows (workspace_id, name, id);
CREATE INDEX workflows_lifecycle_order ON workflows (workspace_id, is_current, name, id);
CREATE INDEX workflows_instance_order ON workflows (instance_id, is_current, name, id);
CREATE INDEX workflows_observed ON workflows (workspace_id, observed_at);
CREATE INDEX workflows_instance_observed ON workflows (instance_id, observed_at);

CREATE TABLE executions (
    id                 uuid PRIMARY KEY,
    workspace_id       uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    instance_id        uuid NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    workflow_id        uuid,
    workflow_name      text NOT NULL,
    source_id          text NOT NULL,
    source_workflow_id text NOT NULL,
    status             text NOT NULL CHECK (status IN
        ('success', 'error', 'crashed', 'canceled', 'new', 'running', 'waiting', 'unknown')),
    started_at         timestamptz,
    created_at         timestamptz,
    stopped_at         timestamptz,
    observed_at        timestamptz NOT NULL,
    source_missing     boolean NOT NULL,
    -- order key: coalesce(startedAt, createdAt, observedAt); chronology exists when dated
    sort_at            timestamptz GENERATED ALWAYS AS (coalesce(started_at, created_at, observed_at)) STORED,
    dated              boolean GENERATED ALWAYS AS (started_at IS NOT NULL OR created_at IS NOT NULL) STORED,
    cost_state         smallint NOT NULL DEFAULT 0 CHECK (cost_state IN (0, 1, 2)), -- absent, null, present
    cost_amount        numeric CHECK (cost_amount >= 0),
    cc_state           text,      -- costCoverage.state; null: costCoverage absent
    cc_priced          bigint,
    cc_unresolved      bigint,
    cc_excluded        bigint,
    cc_observations    bigint,
    cc_missing_mapping bigint,    -- null: field absent
    history            text       -- the bounded history report, compact JSON (load-time); null: absent
);
CREATE INDEX executions_order ON executions (workspace_id, sort_at DESC, id DESC);
CREATE INDEX executions_status_order ON executions (workspace_id, status, sort_at DESC, id DESC);
CREATE INDEX executions_instance_order ON executions (instance_id, sort_at DESC, id DESC);
CREATE INDEX executions_workflow_order ON executions (workflow_id, sort_at DESC, id DESC)
    WHERE workflow_id IS NOT NULL;
CREATE INDEX executions_observed ON executions (workspace_id, observed_at);
CREATE INDEX executions_instance_observed ON executions (instance_id, observed_at);

-- Derived per workflow by the load paths (never by hand): the costMedian and
-- missingMappingObservations of get_many_workflows / get_workflow.
CREATE TABLE workflow_execution_summaries (
    workflow_id                  uuid PRIMARY KEY REFERENCES workflows (id) ON DELETE CASCADE,
    total_executions             bigint NOT NULL,
    priced_executions            bigint NOT NULL,
    median_amount                numeric,   -- null: nothing priced, or precision exceeded
    cost_partial                 boolean NOT NULL,
    missing_mapping_observations bigint     -- null: no execution carries the field
);
