-- tidelog SQLite schema, version 5: stream group membership.
--
-- Members find each other through these tables; whoever heartbeats runs
-- the rebalance in a write transaction, so no coordinator process exists.
-- A partition has an owner (who holds it now) and a target (who should):
-- it moves only when the owner releases it or the owner's session expires,
-- so no partition is ever held by two live members.

CREATE TABLE group_members (
    grp        TEXT NOT NULL,
    member     TEXT NOT NULL,
    topics     TEXT NOT NULL,      -- JSON list of subscribed topic names
    session_ms INTEGER NOT NULL,
    heartbeat  INTEGER NOT NULL,   -- ms since epoch
    joined     INTEGER NOT NULL,
    PRIMARY KEY (grp, member)
) WITHOUT ROWID;

CREATE TABLE group_state (
    grp        TEXT PRIMARY KEY,
    generation INTEGER NOT NULL,
    assignor   TEXT NOT NULL,
    members    TEXT NOT NULL,      -- the member set the targets were computed for
    layout     TEXT NOT NULL       -- the partitions they were computed over
) WITHOUT ROWID;

CREATE TABLE group_assignment (
    grp       TEXT NOT NULL,
    pid       INTEGER NOT NULL,
    topic     TEXT NOT NULL,
    partition INTEGER NOT NULL,
    owner     TEXT,                -- the member holding it now
    owner_gen INTEGER NOT NULL DEFAULT 0,  -- generation at which the owner took it
    target    TEXT,                -- the member that should hold it
    PRIMARY KEY (grp, pid)
) WITHOUT ROWID;
