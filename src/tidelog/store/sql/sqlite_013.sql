-- tidelog SQLite schema, version 13: a Kafka commit's metadata as its UTF-8 bytes.
--
-- Kafka keeps any string a commit's metadata holds, a NUL character included
-- (librdkafka's clients send "...\0"), and hands it back as it came.
-- PostgreSQL's text cannot hold a NUL, so both stores keep the metadata's
-- UTF-8 bytes (PostgreSQL's version 9) and the statements they share
-- (store/classic.py) read and write one form. SQLite cannot change a column's
-- type in place: the table is made again, its rows' text cast to its bytes.

CREATE TABLE classic_commits_bytes (
    grp      TEXT NOT NULL,
    pid      INTEGER NOT NULL,
    position INTEGER NOT NULL,  -- the offset the client committed, negative ones included
    metadata BLOB NOT NULL,     -- UTF-8
    PRIMARY KEY (grp, pid)
) WITHOUT ROWID;

INSERT INTO classic_commits_bytes (grp, pid, position, metadata)
SELECT grp, pid, position, CAST(metadata AS BLOB) FROM classic_commits;

DROP TABLE classic_commits;

ALTER TABLE classic_commits_bytes RENAME TO classic_commits;
