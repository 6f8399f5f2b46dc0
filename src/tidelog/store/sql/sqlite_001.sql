-- tidelog SQLite schema, version 1.
--
-- A record's row id packs its partition and offset: id = pid << 40 | offset.
-- One integer B-tree then serves appends (always at the end of a partition's
-- range), range reads in offset order and "last offset" look-ups, which is
-- what keeps a send to one statement. 2^40 offsets per partition.

CREATE TABLE topics (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused
    name       TEXT NOT NULL UNIQUE,
    partitions INTEGER NOT NULL,
    config     TEXT NOT NULL,                      -- JSON of TopicConfig
    created    INTEGER NOT NULL
);

CREATE TABLE partitions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT, -- pid, never reused
    topic_id    INTEGER NOT NULL,
    partition   INTEGER NOT NULL,
    -- the highest offset ever removed from this partition: appends continue
    -- after it even when the partition was emptied, so offsets never repeat
    base_offset INTEGER NOT NULL DEFAULT 0,
    UNIQUE (topic_id, partition)
);

CREATE TABLE records (
    id    INTEGER PRIMARY KEY,   -- pid << 40 | offset
    ts    INTEGER NOT NULL,      -- ms since epoch
    value BLOB NOT NULL,         -- BLOB for bytes, TEXT for text and JSON
    meta  BLOB                   -- key, headers, producer, text marker (records.py); NULL when none
);

CREATE TABLE groups (
    name    TEXT PRIMARY KEY,
    mode    TEXT NOT NULL,          -- 'stream' or 'queue'
    config  TEXT NOT NULL,
    created INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE offsets (
    grp       TEXT NOT NULL,
    pid       INTEGER NOT NULL,
    committed INTEGER NOT NULL,
    PRIMARY KEY (grp, pid)
) WITHOUT ROWID;
