-- The remote-write queue: each row is one request (a snappy-compressed protobuf
-- WriteRequest) for one [[remote_write]] target, sent oldest first; it survives restarts and
-- outages up to the target's max_queue (the oldest go first when it is full).

CREATE TABLE remote_write_queue (
    id              INTEGER PRIMARY KEY,
    target          TEXT    NOT NULL,            -- [[remote_write]] name
    created_ms      INTEGER NOT NULL,            -- when the snapshot was taken
    samples         INTEGER NOT NULL,
    payload         BLOB    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT
);
CREATE INDEX remote_write_queue_target ON remote_write_queue (target, id);

-- What each target has done since the database was created (counters survive restarts).
CREATE TABLE remote_write_status (
    target           TEXT PRIMARY KEY,
    sent_requests    INTEGER NOT NULL DEFAULT 0,
    sent_samples     INTEGER NOT NULL DEFAULT 0,
    refused_requests INTEGER NOT NULL DEFAULT 0,  -- 4xx: permanent, not retried
    refused_samples  INTEGER NOT NULL DEFAULT 0,
    dropped_requests INTEGER NOT NULL DEFAULT 0,  -- the queue was full
    dropped_samples  INTEGER NOT NULL DEFAULT 0,
    failed_attempts  INTEGER NOT NULL DEFAULT 0,  -- 5xx, 429, timeouts: retried
    last_success_ms  INTEGER,
    last_error_ms    INTEGER,
    last_error       TEXT
) WITHOUT ROWID;
