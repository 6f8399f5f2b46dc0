-- tidelog SQLite schema, version 9: a receipt from an earlier delivery stays
-- refused after the record is finished.
--
-- An acked or dead-lettered record loses its queue_state row. When it had
-- been delivered more than once, the receipt that finished it is kept here:
-- an ack with the receipt of an earlier delivery is then a LeaseLost, while
-- the same final receipt again stays a no-op (a retried ack). A record
-- finished at its first delivery needs no row: no earlier receipt exists.
-- Rows go with their records (retention, compaction, trim), their group and
-- their topic.
CREATE TABLE queue_finished (
    pid     INTEGER NOT NULL,
    offset  INTEGER NOT NULL,
    grp     TEXT NOT NULL,
    receipt TEXT NOT NULL,                -- the receipt of the delivery that finished the record
    PRIMARY KEY (pid, offset, grp)
) WITHOUT ROWID;
