-- Alert state and history, written by the daemon's rules thread (short transactions on its
-- own connection). One row per alert episode: identity = rule + GPU (+ process); the row of
-- an episode that is still pending or firing is the live state the daemon restores after a
-- restart, so a firing alert is neither lost nor fired again and pending time counts.

CREATE TABLE alerts (
    id              INTEGER PRIMARY KEY,
    rule            TEXT    NOT NULL,
    gpu_id          INTEGER NOT NULL,  -- gpus.id (host-scope rules: the host's first GPU)
    process_id      INTEGER,           -- processes.id for per-process rules
    scope           TEXT    NOT NULL,  -- gpu | process | host
    state           TEXT    NOT NULL,  -- pending | firing | resolved
    severity        TEXT,              -- info | warning | critical (while firing)
    reported        INTEGER NOT NULL DEFAULT 0,  -- 1 once reported firing (not muted)
    active_since_ms INTEGER NOT NULL,  -- the condition started to hold
    fired_ms        INTEGER,
    resolved_ms     INTEGER,
    last_true_ms    INTEGER,
    kept_since_ms   INTEGER,           -- keep_firing_for counts from here
    summary         TEXT,              -- as rendered when it fired
    labels_json     TEXT,
    updated_ms      INTEGER NOT NULL
);
CREATE UNIQUE INDEX alerts_live ON alerts (rule, gpu_id, ifnull(process_id, -1))
    WHERE state IN ('pending', 'firing');
CREATE INDEX alerts_time ON alerts (active_since_ms);
