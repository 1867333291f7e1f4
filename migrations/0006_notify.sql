-- Alert delivery: the durable outbox and silences.
--
-- `outbox` is written by the rules thread in the same transaction that changes the
-- alert's state (one row per routed receiver), and by the sender (repeats, self alerts);
-- the sender delivers pending rows in id order per receiver and marks them. A row is never
-- deleted while pending: the backlog is bounded only by the database size bound.

CREATE TABLE outbox (
    id                 INTEGER PRIMARY KEY,  -- enqueue order = delivery order per receiver
    receiver           TEXT    NOT NULL,     -- [[notify.*]] name
    group_key          TEXT    NOT NULL,     -- route + group_by label values
    alert_id           INTEGER,              -- alerts.id (NULL: self alerts)
    kind               TEXT    NOT NULL,     -- firing | resolved | repeat | self
    payload_json       TEXT    NOT NULL,     -- the alert as notified (notify::AlertMsg)
    created_ms         INTEGER NOT NULL,     -- when the transition happened
    group_wait_ms      INTEGER NOT NULL,
    group_interval_ms  INTEGER NOT NULL,
    repeat_interval_ms INTEGER NOT NULL,
    status             TEXT    NOT NULL DEFAULT 'pending',
                       -- pending | sent | dead (permanent error) | silenced | skipped
    attempts           INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms    INTEGER NOT NULL DEFAULT 0,
    last_error         TEXT,                 -- scrubbed of secrets
    done_ms            INTEGER,              -- when it left `pending`
    batch_id           INTEGER               -- rows delivered in one message share it
);
CREATE INDEX outbox_pending ON outbox (receiver, id) WHERE status = 'pending';
CREATE INDEX outbox_group ON outbox (receiver, group_key, status, done_ms);
CREATE INDEX outbox_alert ON outbox (alert_id, receiver);
-- The outbox finds an alert's id by identity, also after it ended (the live-row index of
-- 0005 covers pending/firing rows only).
CREATE INDEX alerts_identity ON alerts (rule, gpu_id, ifnull(process_id, -1), id);

CREATE TABLE silences (
    id          INTEGER PRIMARY KEY,
    matchers    TEXT    NOT NULL,  -- e.g. rule=gpu_idle,gpu=3 (notify::matcher syntax)
    starts_ms   INTEGER NOT NULL,
    ends_ms     INTEGER NOT NULL,
    comment     TEXT    NOT NULL DEFAULT '',
    created_by  TEXT,
    created_ms  INTEGER NOT NULL,
    expired_ms  INTEGER            -- set by `gpuwatch silence expire`
);
CREATE INDEX silences_active ON silences (ends_ms);
