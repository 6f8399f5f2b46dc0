-- tidelog PostgreSQL schema, version 9: a Kafka commit's metadata as its UTF-8 bytes.
--
-- Kafka keeps any string a commit's metadata holds, a NUL character included
-- (librdkafka's clients send "...\0"), and hands it back as it came; text
-- cannot hold a NUL (the commit failed, and the listener closed the client's
-- connection). bytea holds any string's UTF-8 bytes; SQLite keeps the same
-- (its version 13), so the statements both stores share read one form.

ALTER TABLE tidelog_classic_commits
    ALTER COLUMN metadata TYPE bytea USING convert_to(metadata, 'UTF8');
