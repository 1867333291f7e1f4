-- 0004_training_source: health of the training-metrics source (Prometheus), per host and role.
-- Written by the training fetcher after every poll, in the same transaction as the points it
-- fetched; read by the rule evaluator (which does no network I/O) to raise
-- training_metrics_unavailable, and to never mistake an outage for a training hang.
-- Times are the evaluation clock's (the end of the polled range), ms since the epoch, UTC.

CREATE TABLE training_source (
    host_id              INTEGER NOT NULL REFERENCES hosts (id),
    role                 TEXT    NOT NULL,  -- 'step' or 'loss'
    query                TEXT    NOT NULL,  -- the PromQL of the latest poll
    last_attempt_ms      INTEGER NOT NULL,  -- latest poll, successful or not
    last_success_ms      INTEGER,           -- latest poll that got an answer (even empty)
    last_error_ms        INTEGER,           -- latest failed poll
    last_error_kind      TEXT,              -- unreachable, timeout, http_5xx, http_4xx, not_json, ...
    last_error           TEXT,              -- its message (never contains a secret)
    last_nonempty_ms     INTEGER,           -- latest poll whose answer had >= 1 finite point;
                                            -- NULL: this host never had training metrics
    last_point_ms        INTEGER,           -- newest point timestamp ever received
    last_series          INTEGER,           -- series in the latest successful answer
    consecutive_failures INTEGER NOT NULL DEFAULT 0,  -- failed polls since the last success
    skipped_non_finite   INTEGER NOT NULL DEFAULT 0,  -- NaN/Inf values skipped, in total
    PRIMARY KEY (host_id, role)
) WITHOUT ROWID;

CREATE VIEW training_sources AS
SELECT h.name AS host,
       t.role, t.query, t.last_attempt_ms, t.last_success_ms, t.last_error_ms,
       t.last_error_kind, t.last_error, t.last_nonempty_ms, t.last_point_ms, t.last_series,
       t.consecutive_failures, t.skipped_non_finite,
       strftime('%Y-%m-%dT%H:%M:%fZ', t.last_success_ms / 1000.0, 'unixepoch') AS last_success_utc
FROM training_source t
JOIN hosts h ON h.id = t.host_id;
