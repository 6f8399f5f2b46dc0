-- tidelog SQLite schema, version 6: retention and compaction.

-- Offsets at or below removed_through were removed by retention: reading
-- from before it is out of range. (base_offset stays "appends continue
-- after it", which compaction can move too when it removes the newest row.)
ALTER TABLE partitions ADD COLUMN removed_through INTEGER NOT NULL DEFAULT 0;

-- The last cleaning's figures (JSON), for describe and metrics.
ALTER TABLE topics ADD COLUMN last_clean TEXT;
