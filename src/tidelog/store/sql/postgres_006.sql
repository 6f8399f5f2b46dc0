-- tidelog PostgreSQL schema, version 6: a receipt from an earlier delivery
-- stays refused after the record is finished (as SQLite's version 9).
--
-- An acked or dead-lettered record loses its tidelog_queue_state row. When
-- it had been delivered more than once, the receipt that finished it is kept
-- here: an ack with the receipt of an earlier delivery is then a LeaseLost,
-- while the same final receipt again stays a no-op (a retried ack). A record
-- finished at its first delivery needs no row: no earlier receipt exists.
-- Rows go with their records (retention, compaction, trim), their group and
-- their topic.
CREATE TABLE tidelog_queue_finished (
    pid      bigint NOT NULL,
    "offset" bigint NOT NULL,
    grp      text COLLATE "C" NOT NULL,
    receipt  text NOT NULL,                -- the receipt of the delivery that finished the record
    PRIMARY KEY (pid, "offset", grp)
);

-- Deleting a partition (its topic) deletes its finished receipts too.
CREATE OR REPLACE FUNCTION tidelog_queue_partition_gone() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT  -- the log's schema, whoever deletes
AS $$
BEGIN
    DELETE FROM tidelog_queue_state s USING tidelog_queue_cursors c
    WHERE c.pid = OLD.id AND s.grp = c.grp AND s.pid = OLD.id;
    DELETE FROM tidelog_queue_cursors WHERE pid = OLD.id;
    DELETE FROM tidelog_queue_finished WHERE pid = OLD.id;
    RETURN NULL;
END
$$;
