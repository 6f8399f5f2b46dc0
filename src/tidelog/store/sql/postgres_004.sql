-- tidelog PostgreSQL schema, version 4: queue order by priority and by key,
-- and an order that does not depend on the clock's resolution.

-- A nack to the back makes a record due now, behind every record due now or
-- earlier: when those were appended in the same millisecond, the due time
-- alone ties and the offset would put the nacked record first. `seq` breaks
-- the tie: 0 for every record as it arrives, one more than the highest
-- among its group's records due at that time for a nack to the back.
ALTER TABLE tidelog_queue_state ADD COLUMN seq integer NOT NULL DEFAULT 0;
-- The record's priority (0-9, higher first), from its header, kept while
-- the record is released, expires or is delivered again.
ALTER TABLE tidelog_queue_state ADD COLUMN priority smallint NOT NULL DEFAULT 0;

-- A group with ordering "key" keeps each record's key here (NULL without
-- one, and in unordered groups): a record is handed out only while no
-- earlier record of its key waits or is in flight in the group.
ALTER TABLE tidelog_queue_state ADD COLUMN okey bytea;
CREATE INDEX tidelog_queue_state_key ON tidelog_queue_state (grp, pid, okey, "offset") WHERE okey IS NOT NULL;

-- Candidates come highest priority first, then oldest due: due rows come
-- before leased ones inside each priority, so a scan stops early.
DROP INDEX tidelog_queue_state_due;
CREATE INDEX tidelog_queue_state_due ON tidelog_queue_state (grp, pid, priority DESC, due, seq, "offset");
