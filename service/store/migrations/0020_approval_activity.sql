-- Approval activity: tool calls an approval made, per tool and hour (UTC), summed over every
-- replica. Each replica counts in memory and adds its counts here about once a second in one
-- upsert (service/auth/activity.py); the approvals page reads the last 24 hours and 7 days
-- and "last used" from these rows. Rows older than the retention are deleted by the flusher.

CREATE TABLE approval_activity (
    approval_id  uuid NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
    hour         timestamptz NOT NULL,     -- start of the hour the calls fell in
    tool         text NOT NULL,
    calls        bigint NOT NULL CHECK (calls >= 1),
    last_call_at timestamptz NOT NULL,     -- the newest call counted in this row
    PRIMARY KEY (approval_id, hour, tool)
);
-- The retention delete reads by age.
CREATE INDEX approval_activity_hour ON approval_activity (hour);
