-- tidelog SQLite schema, version 10: what became of each job (tidelog.Jobs).
--
-- A job is a queue record; the queue group's state says whether it waits, is
-- delayed or leased. What the queue cannot say (it forgets a record once it
-- is finished) is kept here, by the job's record: that a runner started it,
-- that its last run failed and with what, its result once done, that it was
-- cancelled or dead-lettered. A row is written by a runner (a run's end,
-- with the ack in one transaction; a redelivery's start) or by a cancel,
-- each one upsert guarded by the row's state; a cancel writes only while
-- the record is not leased (see store/jobstates.py). Rows expire
-- (`expires`, the Jobs' result_ttl) and go in the cleaning pass
-- (Log.clean), as idempotent-write ids do.
CREATE TABLE job_states (
    grp      TEXT NOT NULL,           -- the queue group running the job
    pid      INTEGER NOT NULL,        -- the job record's partition id
    offset   INTEGER NOT NULL,        -- and offset: the job id names both
    state    TEXT NOT NULL,           -- running, failed, done, dead-lettered, cancelled
    attempts INTEGER NOT NULL,        -- runs started so far
    body     TEXT,                    -- JSON: {"result": ...} or {"error": ...}; NULL when none
    updated  INTEGER NOT NULL,        -- ms since epoch
    expires  INTEGER NOT NULL,        -- ms since epoch: cleaning removes the row after this
    PRIMARY KEY (grp, pid, offset)
) WITHOUT ROWID;

CREATE INDEX job_states_expires ON job_states (expires);
