-- tidelog PostgreSQL schema, version 3: idempotent writes, stream group
-- membership, retention and compaction.
--
-- Uses only the objects of version 1: version 2 (queue groups) is written
-- beside it, and neither needs the other's tables.

-- A write made with a txn id (`Log.write(batches, txn=...)`) claims the id in
-- the transaction that appends its records and stores its result there, so
-- the same write run again (a retried task, a replayed micro-batch) appends
-- nothing and answers as the first one did.
CREATE TABLE tidelog_txns (
    id      text COLLATE "C" PRIMARY KEY,
    result  jsonb NOT NULL,  -- [timestamp, [[topic, partition, first offset, count], ...]]
    created bigint NOT NULL  -- ms since epoch, for pruning old ids
);

-- Stream group membership. Whoever joins, heartbeats, releases or leaves runs
-- the rebalance in one transaction holding the group's row lock here
-- (SELECT ... FOR UPDATE), so changes to one group take turns across every
-- connection, process and machine, and no coordinator process exists.
CREATE TABLE tidelog_group_state (
    grp        text COLLATE "C" PRIMARY KEY,
    generation bigint NOT NULL,
    assignor   text NOT NULL,
    members    text NOT NULL,  -- the member set the targets were computed for
    layout     text NOT NULL   -- the partitions they were computed over
) WITH (fillfactor = 70);

CREATE TABLE tidelog_group_members (
    grp        text COLLATE "C" NOT NULL,
    member     text COLLATE "C" NOT NULL,
    topics     text[] NOT NULL,              -- subscribed topic names, sorted
    session_ms bigint NOT NULL,
    heartbeat  bigint NOT NULL,              -- ms since epoch
    joined     bigint NOT NULL,
    PRIMARY KEY (grp, member)
) WITH (fillfactor = 70);  -- heartbeats update in place (HOT)

-- A partition has an owner (who holds it now) and a target (who should): it
-- moves only once the owner released it or the owner's session expired, so
-- no partition is ever held by two live members. A fenced commit holds this
-- row with FOR SHARE, so ownership cannot change under it.
CREATE TABLE tidelog_group_assignment (
    grp       text COLLATE "C" NOT NULL,
    pid       bigint NOT NULL,
    topic     text COLLATE "C" NOT NULL,
    partition integer NOT NULL,
    owner     text COLLATE "C",            -- the member holding it now
    owner_gen bigint NOT NULL DEFAULT 0,   -- generation at which the owner took it
    target    text COLLATE "C",            -- the member that should hold it
    PRIMARY KEY (grp, pid)
) WITH (fillfactor = 70);

-- Retention. Offsets at or below removed_through were removed by retention:
-- reading from before it is out of range. records and bytes count what the
-- partition holds now (appends add, deletes subtract, in the statement that
-- changes the records), so describing a partition needs no scan even after
-- compaction left gaps.
ALTER TABLE tidelog_partitions
    ADD COLUMN removed_through bigint NOT NULL DEFAULT 0,
    ADD COLUMN records bigint NOT NULL DEFAULT 0,
    ADD COLUMN bytes bigint NOT NULL DEFAULT 0;

-- Records appended before this version. (Writers of version 1 still running
-- during the upgrade would not count theirs: stop them first.)
UPDATE tidelog_partitions p
SET records = s.records, bytes = s.bytes
FROM (
    SELECT pid, count(*) AS records,
           sum(coalesce(octet_length(value), 0) + coalesce(octet_length(text), 0)
               + coalesce(octet_length(meta), 0)) AS bytes
    FROM tidelog_records GROUP BY pid
) s
WHERE s.pid = p.id;

-- The last cleaning's figures, for describe and metrics.
ALTER TABLE tidelog_topics ADD COLUMN last_clean jsonb;
