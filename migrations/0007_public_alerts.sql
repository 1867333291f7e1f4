-- 0007: alerts and their delivery become part of the stable query interface
-- (docs/SCHEMA.md). The state table gets a private name so the public view can be `alerts`.

ALTER TABLE alerts RENAME TO alert_state;

CREATE VIEW alerts AS
SELECT a.id                AS alert_id,
       a.rule,
       a.state,                                   -- pending | firing | resolved
       a.severity,                                -- info | warning | critical
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
       coalesce(a.resolved_ms, a.updated_ms) - a.active_since_ms AS active_ms,
       a.summary,
       strftime('%Y-%m-%dT%H:%M:%fZ', a.active_since_ms / 1000.0, 'unixepoch') AS active_since_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', a.fired_ms / 1000.0, 'unixepoch')        AS fired_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', a.resolved_ms / 1000.0, 'unixepoch')     AS resolved_utc
FROM alert_state a
JOIN gpus g ON g.id = a.gpu_id
JOIN hosts h ON h.id = g.host_id
LEFT JOIN processes p ON p.id = a.process_id;

CREATE VIEW notifications AS
SELECT o.id                AS notification_id,
       o.alert_id,
       o.receiver,
       o.kind,                                    -- firing | resolved | repeat | self
       o.status,                                  -- pending | sent | dead | silenced | skipped
       o.attempts,
       o.last_error,
       o.created_ms,
       o.done_ms,
       o.batch_id,
       json_extract(o.payload_json, '$.rule')     AS rule,
       json_extract(o.payload_json, '$.summary')  AS summary,
       strftime('%Y-%m-%dT%H:%M:%fZ', o.created_ms / 1000.0, 'unixepoch') AS created_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', o.done_ms / 1000.0, 'unixepoch')    AS done_utc
FROM outbox o;

CREATE VIEW training_metrics AS
SELECT ts_ms, time_utc, host, series_id, metric, labels_json, value
FROM training_points;
