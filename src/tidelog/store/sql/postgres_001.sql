-- tidelog PostgreSQL schema, version 1.
--
-- Tables live in the connection's current schema (the first of its
-- search_path) and carry a tidelog_ prefix, so a log can share a database
-- and a schema with the application that writes to it.
--
-- Offsets come from a counter per partition: an append takes the
-- partition's row lock with UPDATE ... RETURNING, which serialises appenders
-- to one partition (and only to that one) until they commit. The counter never
-- goes down, so offsets stay dense and are never reused, whatever is deleted.
--
-- Names use the "C" collation: ordered and compared byte by byte, as SQLite does.

CREATE TABLE tidelog_topics (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- never reused
    name       text COLLATE "C" NOT NULL UNIQUE,
    partitions integer NOT NULL,
    config     jsonb NOT NULL,                                   -- TopicConfig
    created    bigint NOT NULL                                   -- ms since epoch
);

CREATE TABLE tidelog_partitions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- pid, never reused
    topic_id    bigint NOT NULL,
    partition   integer NOT NULL,
    last_offset bigint NOT NULL DEFAULT 0,  -- the newest offset ever appended
    UNIQUE (topic_id, partition)
) WITH (fillfactor = 50);  -- room on the page for HOT updates of last_offset

-- Append-only: rows are inserted at the end of a partition's key range and
-- read back by range scans of the primary key in offset order.
CREATE TABLE tidelog_records (
    pid      bigint NOT NULL,
    "offset" bigint NOT NULL,
    ts       bigint NOT NULL,  -- ms since epoch
    value    bytea,            -- a value sent as bytes ...
    text     text,             -- ... or as text or JSON; a str holding NUL, which
                               -- text cannot, is UTF-8 in value with text = ''
    meta     bytea,            -- key, headers, producer, text marker (records.py); NULL when none
    PRIMARY KEY (pid, "offset"),
    CHECK (value IS NOT NULL OR text IS NOT NULL)
);

CREATE TABLE tidelog_groups (
    name    text COLLATE "C" PRIMARY KEY,
    mode    text NOT NULL,  -- 'stream' or 'queue'
    config  jsonb NOT NULL,
    created bigint NOT NULL
);

CREATE TABLE tidelog_offsets (
    grp       text COLLATE "C" NOT NULL,
    pid       bigint NOT NULL,
    committed bigint NOT NULL,
    PRIMARY KEY (grp, pid)
) WITH (fillfactor = 70);
