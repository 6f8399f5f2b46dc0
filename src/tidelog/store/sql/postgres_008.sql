-- tidelog PostgreSQL schema, version 8: what a Kafka commit says beyond the offset.
--
-- A Kafka consumer group's commit carries a metadata string, which tools keep
-- state in, and may name a negative position (-1, -2: kafkajs's "latest",
-- "earliest"), which Kafka keeps and hands back as it came. The group's
-- committed offset stays in tidelog_offsets (a negative commit removes it:
-- tidelog's stream group has committed nothing there); this table keeps the
-- commit as Kafka's client sent it, which OffsetFetch answers while it is the
-- last word on the partition (`tidelog.classic_groups.kafka_committed`).

CREATE TABLE tidelog_classic_commits (
    grp      text COLLATE "C" NOT NULL,
    pid      bigint NOT NULL,
    position bigint NOT NULL,
    metadata text NOT NULL,
    PRIMARY KEY (grp, pid)
);
