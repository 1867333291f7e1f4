-- 0007: alerts and their delivery become part of the stable query interface; older views gain RFC 3339 text columns
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

-- Every epoch column of the older views gets its RFC 3339 text beside it (columns are
-- only ever added, at the end).

DROP VIEW gpu_inventory;
CREATE VIEW gpu_inventory AS
SELECT g.id                  AS gpu_id,
       h.name                AS host,
       g.uuid                AS gpu_uuid,
       g.gpu_index           AS gpu_index,
       g.name                AS gpu_name,
       g.serial, g.pci_bus_id, g.driver_version, g.cuda_driver_version, g.nvml_version,
       g.memory_total_bytes,
       g.memory_total_bytes / 1048576.0 AS memory_total_mib,
       g.power_limit_mw, g.power_limit_min_mw, g.power_limit_max_mw,
       g.temp_slowdown_c, g.temp_shutdown_c, g.temp_gpu_max_c,
       g.pcie_max_gen, g.pcie_max_width, g.persistence_mode, g.mig_mode,
       g.first_seen_ms, g.last_seen_ms, g.last_sample_ms, g.lost_at_ms,
       g.lost_at_ms IS NOT NULL AS lost,
       strftime('%Y-%m-%dT%H:%M:%fZ', g.last_seen_ms / 1000.0, 'unixepoch') AS last_seen_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', g.first_seen_ms / 1000.0, 'unixepoch') AS first_seen_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', g.last_sample_ms / 1000.0, 'unixepoch') AS last_sample_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', g.lost_at_ms / 1000.0, 'unixepoch') AS lost_at_utc
FROM gpus g JOIN hosts h ON h.id = g.host_id;

DROP VIEW gpu_processes;
CREATE VIEW gpu_processes AS
SELECT ps.ts_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', ps.ts_ms / 1000.0, 'unixepoch') AS time_utc,
       h.name      AS host,
       g.uuid      AS gpu_uuid,
       g.gpu_index AS gpu_index,
       p.id        AS process_id,
       p.pid, p.start_time_ms,
       p.name      AS process_name,
       p.user, p.cmdline,
       ps.used_mem_bytes,
       ps.used_mem_bytes / 1048576.0 AS used_mem_mib,
       strftime('%Y-%m-%dT%H:%M:%fZ', nullif(p.start_time_ms, 0) / 1000.0, 'unixepoch') AS start_time_utc
FROM process_samples ps
JOIN processes p ON p.id = ps.process_id
JOIN gpus g ON g.id = ps.gpu_id
JOIN hosts h ON h.id = g.host_id;

DROP VIEW gpu_metric_errors;
CREATE VIEW gpu_metric_errors AS
SELECT h.name      AS host,
       g.uuid      AS gpu_uuid,
       g.gpu_index AS gpu_index,
       m.metric, m.error, m.count, m.first_ms, m.last_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', m.last_ms / 1000.0, 'unixepoch') AS last_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', m.first_ms / 1000.0, 'unixepoch') AS first_utc
FROM metric_errors m
JOIN gpus g ON g.id = m.gpu_id
JOIN hosts h ON h.id = g.host_id;

DROP VIEW training_sources;
CREATE VIEW training_sources AS
SELECT h.name AS host,
       t.role, t.query, t.last_attempt_ms, t.last_success_ms, t.last_error_ms,
       t.last_error_kind, t.last_error, t.last_nonempty_ms, t.last_point_ms, t.last_series,
       t.consecutive_failures, t.skipped_non_finite,
       strftime('%Y-%m-%dT%H:%M:%fZ', t.last_success_ms / 1000.0, 'unixepoch') AS last_success_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', t.last_attempt_ms / 1000.0, 'unixepoch') AS last_attempt_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', t.last_error_ms / 1000.0, 'unixepoch') AS last_error_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', t.last_nonempty_ms / 1000.0, 'unixepoch') AS last_nonempty_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', t.last_point_ms / 1000.0, 'unixepoch') AS last_point_utc
FROM training_source t
JOIN hosts h ON h.id = t.host_id;
