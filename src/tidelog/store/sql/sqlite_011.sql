-- tidelog SQLite schema, version 11: records as a client sent them (wire batches).
--
-- A Kafka producer sends its records as record batches, most of them
-- compressed. The records are stored as every front's are (the records
-- table); the batch's bytes are kept here too, beside the records they
-- hold, so that a Kafka fetch can answer with them as a Kafka broker does,
-- with no record read or encoded again. A row is only a copy: it is served
-- while every record of its range is still there (records are never
-- changed, offsets never reused, so a range whole is the same records),
-- and is dropped with its topic or when retention removes its records.
CREATE TABLE wire_batches (
    id   INTEGER PRIMARY KEY,  -- pid << 40 | offset of its first record
    last INTEGER NOT NULL,     -- offset of its last record
    data BLOB NOT NULL,        -- the batch's bytes, as the client sent them
    size INTEGER NOT NULL      -- what a fetch's byte limits count it as: its records uncompressed
);
