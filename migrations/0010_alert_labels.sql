-- Alerts carry where their work ran: the labels receivers were given (placement included)
-- are stored with each episode, and the `alerts` view shows them, with the pod, namespace
-- and Slurm job pulled out for WHERE clauses.

DROP VIEW alerts;
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
       strftime('%Y-%m-%dT%H:%M:%fZ', a.resolved_ms / 1000.0, 'unixepoch')     AS resolved_utc,
       a.labels_json,
       json_extract(a.labels_json, '$.pod')       AS pod,
       json_extract(a.labels_json, '$.namespace') AS namespace,
       json_extract(a.labels_json, '$.slurm_job') AS slurm_job
FROM alert_state a
JOIN gpus g ON g.id = a.gpu_id
JOIN hosts h ON h.id = g.host_id
LEFT JOIN processes p ON p.id = a.process_id;
