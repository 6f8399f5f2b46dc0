-- tidelog SQLite schema, version 2: queue groups.
--
-- A queue group keeps, per partition, a scan cursor: every record at or
-- below it has been taken into the group's hands. Records in progress (leased,
-- nacked, delayed) have a row in queue_state; an acked or dead-lettered record
-- simply loses its row. So the group's done-prefix is implicit (below the
-- smallest offset with a row, else the cursor) and its state stays as small as
-- the work in flight, however long the topic grows.

CREATE TABLE queue_groups (
    grp           TEXT NOT NULL,
    topic_id      INTEGER NOT NULL,
    config        TEXT NOT NULL,          -- JSON: max_deliveries, dead_letter, start
    dead_lettered INTEGER NOT NULL DEFAULT 0,
    created       INTEGER NOT NULL,
    PRIMARY KEY (grp, topic_id)
) WITHOUT ROWID;

CREATE TABLE queue_cursors (
    grp     TEXT NOT NULL,
    pid     INTEGER NOT NULL,
    scanned INTEGER NOT NULL,             -- highest offset taken into the group
    PRIMARY KEY (grp, pid)
) WITHOUT ROWID;

CREATE TABLE queue_state (
    grp        TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    offset     INTEGER NOT NULL,
    -- when the record may next be handed out: the available time of a waiting
    -- record, or the lease deadline of a leased one (an expired lease is simply
    -- a due row again)
    due        INTEGER NOT NULL,
    deliveries INTEGER NOT NULL,
    receipt    TEXT,                      -- the current lease's receipt; NULL when not leased
    PRIMARY KEY (grp, pid, offset)
) WITHOUT ROWID;

CREATE INDEX queue_state_due ON queue_state (grp, pid, due, offset);

-- A record enters queue_state only when the scan takes it (leased or
-- delayed), in offset order: the cursor follows the highest such offset.
CREATE TRIGGER queue_state_scanned AFTER INSERT ON queue_state
BEGIN
    INSERT INTO queue_cursors(grp, pid, scanned) VALUES (NEW.grp, NEW.pid, NEW.offset)
    ON CONFLICT(grp, pid) DO UPDATE SET scanned = max(scanned, excluded.scanned);
END;
