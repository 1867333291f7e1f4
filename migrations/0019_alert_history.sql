-- Alert history an incident can trust.
--
-- Durations: a live alert's row is written when its state changes, not at every evaluation,
-- so its `updated_ms` is no end. A live episode now lasts until the newest stored sample of
-- its host (the data's end: "now" while the daemon runs, the last sample of a copied or
-- imported database); `pending_ms` and `firing_ms` come from the same end.
--
-- Severity: each episode keeps its highest severity (`max_severity`) and every change of
-- severity while it fired (`alert_severity_changes`, shown as a JSON list in the view).
--
-- Replay: `gpuwatch replay --save` stores the episodes it found with `replayed = 1`. They are
-- never live in `alert_state` (stored `resolved`, `resolved_ms` NULL when the episode was
-- still firing where the replay ended, `updated_ms` that end; the view shows those as
-- `firing` until then), so neither the daemon nor delivery ever picks them up.

ALTER TABLE alert_state ADD COLUMN max_severity TEXT;
UPDATE alert_state SET max_severity = severity;
ALTER TABLE alert_state ADD COLUMN replayed INTEGER NOT NULL DEFAULT 0;

CREATE TABLE alert_severity_changes (
    id            INTEGER PRIMARY KEY,
    alert_id      INTEGER NOT NULL,  -- alert_state.id
    at_ms         INTEGER NOT NULL,
    from_severity TEXT,
    to_severity   TEXT    NOT NULL,
    summary       TEXT               -- the summary as rendered at the change
);
CREATE INDEX alert_severity_changes_by_alert ON alert_severity_changes (alert_id, at_ms);

DROP VIEW alerts;
CREATE VIEW alerts AS
SELECT a.id                AS alert_id,
       a.rule,
       CASE WHEN a.replayed = 1 AND a.fired_ms IS NOT NULL AND a.resolved_ms IS NULL
            THEN 'firing' ELSE a.state END AS state,   -- pending | firing | resolved
       a.severity,                                -- info | warning | critical (the latest)
       a.scope,                                   -- gpu | process | host
       h.name              AS host,
       CASE WHEN a.scope = 'host' THEN NULL ELSE g.uuid END      AS gpu_uuid,
       CASE WHEN a.scope = 'host' THEN NULL ELSE g.gpu_index END AS gpu_index,
       p.pid,
       p.name              AS process_name,
       a.reported,                                -- 1 once reported firing (not muted)
       a.active_since_ms,
       a.fired_ms,
       a.resolved_ms,
       a.end_ms - a.active_since_ms AS active_ms,
       a.summary,
       strftime('%Y-%m-%dT%H:%M:%fZ', a.active_since_ms / 1000.0, 'unixepoch') AS active_since_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', a.fired_ms / 1000.0, 'unixepoch')        AS fired_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', a.resolved_ms / 1000.0, 'unixepoch')     AS resolved_utc,
       a.labels_json,
       json_extract(a.labels_json, '$.pod')       AS pod,
       json_extract(a.labels_json, '$.namespace') AS namespace,
       json_extract(a.labels_json, '$.slurm_job') AS slurm_job,
       coalesce(a.fired_ms, a.end_ms) - a.active_since_ms AS pending_ms,
       a.end_ms - a.fired_ms AS firing_ms,
       coalesce(a.max_severity, a.severity) AS max_severity,
       (SELECT json_group_array(json(c.change)) FROM (
            SELECT json_object('at', strftime('%Y-%m-%dT%H:%M:%fZ', x.at_ms / 1000.0, 'unixepoch'),
                               'at_ms', x.at_ms, 'from', x.from_severity,
                               'to', x.to_severity, 'summary', x.summary) AS change
            FROM alert_severity_changes x WHERE x.alert_id = a.id ORDER BY x.at_ms, x.id) c
       ) AS severity_changes,
       a.replayed
FROM (SELECT s.*,
             -- where the episode ends: resolved; a replayed one still firing where its replay
             -- ended, there (its updated_ms); a live one, at the newest sample of its host
             CASE WHEN s.replayed = 1 THEN coalesce(s.resolved_ms, s.updated_ms)
             ELSE coalesce(s.resolved_ms,
                      max(s.updated_ms,
                          coalesce((SELECT max(g2.last_sample_ms) FROM gpus g1
                                    JOIN gpus g2 ON g2.host_id = g1.host_id
                                    WHERE g1.id = s.gpu_id), s.updated_ms),
                          coalesce(s.fired_ms, s.active_since_ms)))
             END AS end_ms
      FROM alert_state s) a
JOIN gpus g ON g.id = a.gpu_id
JOIN hosts h ON h.id = g.host_id
LEFT JOIN processes p ON p.id = a.process_id;
