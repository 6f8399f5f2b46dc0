-- tidelog PostgreSQL schema, version 2: queue groups and their named consumers.
--
-- The same model as SQLite's versions 2 and 4. A queue group keeps, per
-- partition, a scan cursor: every record at or below it has been taken into
-- the group's hands. Records in progress (leased, released, delayed) have a
-- row in tidelog_queue_state; an acked or dead-lettered record loses its row,
-- so the state stays as small as the work in flight.
--
-- Who may hand out a record: every call that moves a cursor or takes new
-- records first locks the group's row in tidelog_queue_groups (FOR UPDATE),
-- so receivers of one group take turns on the cursor and never lease one
-- record twice. Leases already in tidelog_queue_state are taken with
-- FOR UPDATE SKIP LOCKED; acks, extends and releases touch only their own
-- state row. Lock order, where a call takes several: group row, then state
-- rows, then a partition row (a dead letter's append).

CREATE TABLE tidelog_queue_groups (
    grp           text COLLATE "C" NOT NULL,
    topic_id      bigint NOT NULL,
    config        jsonb NOT NULL,          -- max_deliveries, dead_letter (and kind for Redis groups)
    dead_lettered bigint NOT NULL DEFAULT 0,
    created       bigint NOT NULL,         -- ms since epoch
    PRIMARY KEY (grp, topic_id)
) WITH (fillfactor = 70);  -- dead_lettered is updated in place

CREATE INDEX tidelog_queue_groups_topic ON tidelog_queue_groups (topic_id, created, grp);

CREATE TABLE tidelog_queue_cursors (
    grp     text COLLATE "C" NOT NULL,
    pid     bigint NOT NULL,
    scanned bigint NOT NULL,               -- highest offset taken into the group
    PRIMARY KEY (grp, pid)
) WITH (fillfactor = 50);  -- room for HOT updates: the cursor moves on every receive

CREATE INDEX tidelog_queue_cursors_pid ON tidelog_queue_cursors (pid);

CREATE TABLE tidelog_queue_state (
    grp        text COLLATE "C" NOT NULL,
    pid        bigint NOT NULL,
    "offset"   bigint NOT NULL,
    -- when the record may next be handed out: the available time of a waiting
    -- record, or the lease deadline of a leased one (an expired lease is simply
    -- a due row again)
    due        bigint NOT NULL,
    deliveries integer NOT NULL,
    receipt    text,                       -- the current lease's receipt; NULL when not leased
    consumer   text COLLATE "C",           -- the named consumer holding the lease (Redis groups)
    delivered  bigint                      -- ms of the last delivery or claim to a named consumer
);

CREATE INDEX tidelog_queue_state_due ON tidelog_queue_state (grp, pid, due, "offset");
-- The key comes after the due index on purpose: until the table has
-- statistics the planner costs both the same for a lookup by offset (an ack)
-- and takes the later one; the due index would scan every lease of the group.
ALTER TABLE tidelog_queue_state ADD PRIMARY KEY (grp, pid, "offset");
-- Only named-consumer leases are looked up by consumer; anonymous leases
-- (the common queue) pay nothing for this index.
CREATE INDEX tidelog_queue_state_consumer ON tidelog_queue_state (grp, pid, consumer, "offset")
    WHERE consumer IS NOT NULL;

CREATE TABLE tidelog_queue_consumers (
    grp      text COLLATE "C" NOT NULL,
    topic_id bigint NOT NULL,
    name     text COLLATE "C" NOT NULL,
    seen     bigint NOT NULL,              -- ms of the consumer's last attempted read or claim
    active   bigint,                       -- ms of its last successful read or claim; NULL when none yet
    PRIMARY KEY (grp, topic_id, name)
);

-- Deleting a topic deletes its queue groups' state with it. Every state row
-- has a cursor row for its group and partition (whoever inserts one moves
-- the cursor), so a partition's state is found through its cursors.
CREATE FUNCTION tidelog_queue_partition_gone() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT  -- the log's schema, whoever deletes
AS $$
BEGIN
    DELETE FROM tidelog_queue_state s USING tidelog_queue_cursors c
    WHERE c.pid = OLD.id AND s.grp = c.grp AND s.pid = OLD.id;
    DELETE FROM tidelog_queue_cursors WHERE pid = OLD.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER tidelog_queue_partition_gone AFTER DELETE ON tidelog_partitions
    FOR EACH ROW EXECUTE FUNCTION tidelog_queue_partition_gone();

CREATE FUNCTION tidelog_queue_topic_gone() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT  -- the log's schema, whoever deletes
AS $$
BEGIN
    DELETE FROM tidelog_queue_consumers WHERE topic_id = OLD.id;
    DELETE FROM tidelog_queue_groups WHERE topic_id = OLD.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER tidelog_queue_topic_gone AFTER DELETE ON tidelog_topics
    FOR EACH ROW EXECUTE FUNCTION tidelog_queue_topic_gone();
