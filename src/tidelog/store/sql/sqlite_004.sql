-- tidelog SQLite schema, version 4: named consumers on queue groups.
--
-- Redis consumer groups (tidelog.streams) are queue groups whose leases
-- belong to a named consumer and never expire by themselves. A lease row in
-- queue_state then also says who holds it and when it was last delivered
-- (idle time = now - delivered); queue_consumers lists the consumers a group
-- has seen, as XINFO CONSUMERS shows them.

ALTER TABLE queue_state ADD COLUMN consumer TEXT;      -- the named consumer holding the lease; NULL for anonymous leases
ALTER TABLE queue_state ADD COLUMN delivered INTEGER;  -- ms since epoch of the last delivery or claim; NULL when unknown

CREATE INDEX queue_state_consumer ON queue_state (grp, pid, consumer, offset);

CREATE TABLE queue_consumers (
    grp      TEXT NOT NULL,
    topic_id INTEGER NOT NULL,
    name     TEXT NOT NULL,
    seen     INTEGER NOT NULL,          -- ms of the consumer's last attempted read or claim
    active   INTEGER,                   -- ms of its last successful read or claim; NULL when none yet
    PRIMARY KEY (grp, topic_id, name)
) WITHOUT ROWID;
