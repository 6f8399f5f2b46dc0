-- tidelog PostgreSQL schema, version 4: queue order that does not depend on the clock.

-- A nack to the back makes a record due now, behind every record due now or
-- earlier: when those were appended in the same millisecond, the due time
-- alone ties and the offset would put the nacked record first. `seq` breaks
-- the tie: 0 for every record as it arrives, one more than the highest
-- among its group's records due at that time for a nack to the back.
ALTER TABLE tidelog_queue_state ADD COLUMN seq integer NOT NULL DEFAULT 0;

DROP INDEX tidelog_queue_state_due;
CREATE INDEX tidelog_queue_state_due ON tidelog_queue_state (grp, pid, due, seq, "offset");
