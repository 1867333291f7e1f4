-- 0014: the audit of GPU setting changes (docs/MANAGEMENT.md). One row per write that
-- `gpuwatch gpu set` attempted — written before the NVML call with result 'attempted', then
-- updated with its outcome, so a write whose outcome never came back (a crash, a hung
-- driver) stays visible as 'attempted' — and one per change the daemon observed between two
-- inventory reads that no `gpu set` row explains (who = 'observed', uid NULL).
-- Kept forever (a few rows per change), like silences.

CREATE TABLE gpu_audit_log (
    id        INTEGER PRIMARY KEY,
    ts_ms     INTEGER NOT NULL,             -- when the write was attempted / the change seen
    gpu_id    INTEGER NOT NULL,             -- gpus.id
    who       TEXT    NOT NULL,             -- the user (name, 'root, sudo by alice'); 'observed'
    uid       INTEGER,                      -- the user's real uid; NULL for 'observed'
    setting   TEXT    NOT NULL,             -- power_limit | persistence | gpu_locked_clocks |
                                            -- memory_locked_clocks | compute_mode
    old_value TEXT,                         -- as read before the write; NULL when unknown
    new_value TEXT    NOT NULL,
    result    TEXT    NOT NULL,             -- attempted | ok | failed | unknown
    error     TEXT,                         -- NVML's return code and what it means
    done_ms   INTEGER                       -- when the outcome was recorded
);

CREATE INDEX gpu_audit_log_by_gpu ON gpu_audit_log (gpu_id, setting, ts_ms);

CREATE VIEW gpu_audit AS
SELECT a.id        AS audit_id,
       a.ts_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', a.ts_ms / 1000.0, 'unixepoch') AS time_utc,
       h.name      AS host,
       g.uuid      AS gpu_uuid,
       g.gpu_index AS gpu_index,
       a.who,
       a.uid,
       a.setting,
       a.old_value,
       a.new_value,
       a.result,
       a.error,
       a.done_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', a.done_ms / 1000.0, 'unixepoch') AS done_utc
FROM gpu_audit_log a
JOIN gpus g ON g.id = a.gpu_id
JOIN hosts h ON h.id = g.host_id;
