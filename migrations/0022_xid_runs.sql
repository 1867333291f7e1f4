-- 0022: XID runs. A storm of one XID on one GPU (tens of thousands of identical kernel-log
-- lines) is one row, not one row per line: repeats of one code on one GPU fold into the row
-- of their run (store/events.rs: a run ends after a quiet gap of XID_RUN_GAP_MS, or when it
-- has lasted XID_RUN_SPAN_MS).
--
-- * count: the run's events (1 for a single event and for every non-XID event); the larger
--   of what each side saw when NVML and the kernel log both reported it.
-- * last_ms: the `ts_ms` of the run's last event (NULL: the run is one event, last = ts_ms).
-- * nvml_count / kernel_count: the events NVML's event API / the kernel log (follower or
--   import) reported in this run (NULL: that side saw none).
-- * kernel_last_ms: the kernel time of the kernel log's last event of the run.
-- * messages: the run's distinct messages after the first (`message`), one per line, at most
--   XID_RUN_MESSAGES of them.
ALTER TABLE events ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
ALTER TABLE events ADD COLUMN last_ms INTEGER;
ALTER TABLE events ADD COLUMN nvml_count INTEGER;
ALTER TABLE events ADD COLUMN kernel_count INTEGER;
ALTER TABLE events ADD COLUMN kernel_last_ms INTEGER;
ALTER TABLE events ADD COLUMN messages TEXT;

UPDATE events SET nvml_count = 1 WHERE kind = 'xid' AND source LIKE 'nvml%';
UPDATE events SET kernel_count = 1, kernel_last_ms = kernel_ms
 WHERE kind = 'xid' AND (source LIKE '%kmsg' OR source LIKE '%import');

DROP VIEW gpu_events;
CREATE VIEW gpu_events AS
SELECT e.id AS event_id,
       e.ts_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', e.ts_ms / 1000.0, 'unixepoch') AS time_utc,
       h.name      AS host,
       g.uuid      AS gpu_uuid,
       g.gpu_index AS gpu_index,
       e.kind, e.code, e.message,
       e.pci_bus_id,
       e.source,
       e.kernel_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', e.kernel_ms / 1000.0, 'unixepoch') AS kernel_utc,
       e.count,
       coalesce(e.last_ms, e.ts_ms) AS last_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', coalesce(e.last_ms, e.ts_ms) / 1000.0, 'unixepoch')
                   AS last_utc,
       e.messages,
       (SELECT gh.training_job FROM gpu_holders gh
         WHERE gh.gpu_id = e.gpu_id AND gh.from_ms <= e.ts_ms
           AND (gh.to_ms IS NULL OR gh.to_ms >= e.ts_ms)
         ORDER BY gh.from_ms DESC LIMIT 1) AS training_job,
       (SELECT gh.pod FROM gpu_holders gh
         WHERE gh.gpu_id = e.gpu_id AND gh.from_ms <= e.ts_ms
           AND (gh.to_ms IS NULL OR gh.to_ms >= e.ts_ms)
         ORDER BY gh.from_ms DESC LIMIT 1) AS pod
FROM events e
JOIN hosts h ON h.id = e.host_id
LEFT JOIN gpus g ON g.id = e.gpu_id;
