-- tidelog PostgreSQL schema, version 5: Kafka's classic group protocol.
--
-- A Kafka consumer group is a tidelog stream group (its name in
-- tidelog_groups, its commits in tidelog_offsets); these tables keep what
-- Kafka's protocol adds: the group's generation and phase, the assignor its
-- members agreed on, its leader, and each member's subscription and the
-- assignment the leader gave it, so every `tidelog serve` over this database
-- coordinates the same group (each locks the group's row to change it). The
-- policy is the core's (`tidelog.classic_groups`).

CREATE TABLE tidelog_classic_groups (
    grp           text PRIMARY KEY,
    generation    integer NOT NULL,
    phase         text NOT NULL,
    protocol_type text NOT NULL,
    protocol      text NOT NULL,
    leader        text NOT NULL,
    deadline      bigint NOT NULL
);

CREATE TABLE tidelog_classic_members (
    grp          text NOT NULL,
    member       text NOT NULL,
    instance     text,
    client_id    text NOT NULL,
    host         text NOT NULL,
    session_ms   integer NOT NULL,
    rebalance_ms integer NOT NULL,
    heartbeat    bigint NOT NULL,
    protocols    bytea NOT NULL,
    joined       boolean NOT NULL,
    generation   integer NOT NULL,
    assignment   bytea NOT NULL,
    PRIMARY KEY (grp, member)
);
