-- tidelog SQLite schema, version 8: Kafka's classic group protocol.
--
-- A Kafka consumer group is a tidelog stream group (its name in `groups`,
-- its commits in `offsets`); these tables keep what Kafka's protocol adds:
-- the group's generation and phase, the assignor its members agreed on, its
-- leader, and each member's subscription and the assignment the leader gave
-- it, so a group survives a restart and is shared by every process on the
-- file. The policy is the core's (`tidelog.classic_groups`).

CREATE TABLE classic_groups (
    grp           TEXT PRIMARY KEY,
    generation    INTEGER NOT NULL,
    phase         TEXT NOT NULL,      -- empty, preparing, completing, stable
    protocol_type TEXT NOT NULL,
    protocol      TEXT NOT NULL,
    leader        TEXT NOT NULL,
    deadline      INTEGER NOT NULL    -- preparing: ms when the join completes regardless
) WITHOUT ROWID;

CREATE TABLE classic_members (
    grp          TEXT NOT NULL,
    member       TEXT NOT NULL,
    instance     TEXT,
    client_id    TEXT NOT NULL,
    host         TEXT NOT NULL,
    session_ms   INTEGER NOT NULL,
    rebalance_ms INTEGER NOT NULL,
    heartbeat    INTEGER NOT NULL,
    protocols    BLOB NOT NULL,
    joined       INTEGER NOT NULL,
    generation   INTEGER NOT NULL,
    assignment   BLOB NOT NULL,
    PRIMARY KEY (grp, member)
) WITHOUT ROWID;
