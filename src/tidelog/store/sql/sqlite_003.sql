-- tidelog SQLite schema, version 3: idempotent writes.
--
-- A write made with a txn id (`Log.write(batches, txn=...)`) records the id
-- in the same transaction as its records, with its result, so that the same
-- write run again (a retried task, a replayed micro-batch) appends nothing
-- and answers as the first one did. Version 2 is the queue-group schema.

CREATE TABLE txns (
    id      TEXT PRIMARY KEY,
    result  TEXT NOT NULL,   -- JSON: [timestamp, [[topic, partition, first offset, count], ...]]
    created INTEGER NOT NULL -- ms since epoch, for pruning old ids
) WITHOUT ROWID;
