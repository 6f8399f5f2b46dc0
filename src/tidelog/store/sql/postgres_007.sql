-- tidelog PostgreSQL schema, version 7: what became of each job (as
-- SQLite's version 10; see sqlite_010.sql for why the table is there).
CREATE TABLE tidelog_job_states (
    grp      text COLLATE "C" NOT NULL,
    pid      bigint NOT NULL,
    "offset" bigint NOT NULL,
    state    text NOT NULL,
    attempts integer NOT NULL,
    body     text,
    updated  bigint NOT NULL,
    expires  bigint NOT NULL,
    PRIMARY KEY (grp, pid, "offset")
);

CREATE INDEX tidelog_job_states_expires ON tidelog_job_states (expires);
