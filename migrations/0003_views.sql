-- 0003_views: the stable, documented query interface (docs/SCHEMA.md).
-- Views may gain columns in later versions; existing columns keep their name, type and unit.
-- Filter on ts_ms (integer ms, UTC) for speed: it maps onto the tables' primary keys.

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
       strftime('%Y-%m-%dT%H:%M:%fZ', g.last_seen_ms / 1000.0, 'unixepoch') AS last_seen_utc
FROM gpus g JOIN hosts h ON h.id = g.host_id;

CREATE VIEW gpu_samples AS
SELECT s.ts_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', s.ts_ms / 1000.0, 'unixepoch') AS time_utc,
       h.name      AS host,
       g.uuid      AS gpu_uuid,
       g.gpu_index AS gpu_index,
       g.name      AS gpu_name,
       CASE s.status WHEN 0 THEN 'ok' WHEN 1 THEN 'deadline_missed' WHEN 2 THEN 'lost'
                     ELSE 'unknown' END AS status,
       s.util_gpu_pct, s.util_mem_pct,
       s.mem_used_bytes, s.mem_free_bytes, s.mem_total_bytes,
       s.mem_used_bytes / 1048576.0 AS mem_used_mib,
       s.temp_c, s.fan_pct, s.clock_sm_mhz, s.clock_mem_mhz,
       s.power_mw, s.power_mw / 1000.0 AS power_w, s.power_limit_mw, s.energy_mj,
       s.pstate, s.pcie_tx_kbs, s.pcie_rx_kbs, s.pcie_gen, s.pcie_width,
       s.throttle_reasons, s.ecc_corrected, s.ecc_uncorrected, s.retired_pages,
       s.remapped_rows_correctable, s.remapped_rows_uncorrectable,
       s.remap_pending, s.remap_failure
FROM samples s
JOIN gpus g ON g.id = s.gpu_id
JOIN hosts h ON h.id = g.host_id;

CREATE VIEW gpu_rollups AS
SELECT r.ts_ms,
       strftime('%Y-%m-%dT%H:%M:%SZ', r.ts_ms / 1000, 'unixepoch') AS minute_utc,
       h.name      AS host,
       g.uuid      AS gpu_uuid,
       g.gpu_index AS gpu_index,
       g.name      AS gpu_name,
       r.n AS samples, r.n_missed AS samples_missed, r.n_lost AS samples_lost,
       r.util_gpu_min AS util_gpu_pct_min, r.util_gpu_avg AS util_gpu_pct_avg,
       r.util_gpu_max AS util_gpu_pct_max,
       r.util_mem_min AS util_mem_pct_min, r.util_mem_avg AS util_mem_pct_avg,
       r.util_mem_max AS util_mem_pct_max,
       r.mem_used_min AS mem_used_bytes_min, r.mem_used_avg AS mem_used_bytes_avg,
       r.mem_used_max AS mem_used_bytes_max,
       r.temp_min AS temp_c_min, r.temp_avg AS temp_c_avg, r.temp_max AS temp_c_max,
       r.power_min AS power_mw_min, r.power_avg AS power_mw_avg, r.power_max AS power_mw_max,
       r.clock_sm_min AS clock_sm_mhz_min, r.clock_sm_avg AS clock_sm_mhz_avg,
       r.clock_sm_max AS clock_sm_mhz_max,
       r.clock_mem_min AS clock_mem_mhz_min, r.clock_mem_avg AS clock_mem_mhz_avg,
       r.clock_mem_max AS clock_mem_mhz_max,
       r.fan_min AS fan_pct_min, r.fan_avg AS fan_pct_avg, r.fan_max AS fan_pct_max,
       r.pcie_tx_min AS pcie_tx_kbs_min, r.pcie_tx_avg AS pcie_tx_kbs_avg,
       r.pcie_tx_max AS pcie_tx_kbs_max,
       r.pcie_rx_min AS pcie_rx_kbs_min, r.pcie_rx_avg AS pcie_rx_kbs_avg,
       r.pcie_rx_max AS pcie_rx_kbs_max,
       r.ecc_corrected_max, r.ecc_uncorrected_max, r.throttle_reasons_or, r.energy_mj_max
FROM rollups_1m r
JOIN gpus g ON g.id = r.gpu_id
JOIN hosts h ON h.id = g.host_id;

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
       ps.used_mem_bytes / 1048576.0 AS used_mem_mib
FROM process_samples ps
JOIN processes p ON p.id = ps.process_id
JOIN gpus g ON g.id = ps.gpu_id
JOIN hosts h ON h.id = g.host_id;

CREATE VIEW gpu_events AS
SELECT e.id AS event_id,
       e.ts_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', e.ts_ms / 1000.0, 'unixepoch') AS time_utc,
       h.name      AS host,
       g.uuid      AS gpu_uuid,
       g.gpu_index AS gpu_index,
       e.kind, e.code, e.message
FROM events e
JOIN hosts h ON h.id = e.host_id
LEFT JOIN gpus g ON g.id = e.gpu_id;

CREATE VIEW gpu_metric_errors AS
SELECT h.name      AS host,
       g.uuid      AS gpu_uuid,
       g.gpu_index AS gpu_index,
       m.metric, m.error, m.count, m.first_ms, m.last_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', m.last_ms / 1000.0, 'unixepoch') AS last_utc
FROM metric_errors m
JOIN gpus g ON g.id = m.gpu_id
JOIN hosts h ON h.id = g.host_id;

CREATE VIEW training_points AS
SELECT t.ts_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', t.ts_ms / 1000.0, 'unixepoch') AS time_utc,
       h.name AS host,
       s.id   AS series_id,
       s.name AS metric,
       s.labels_json,
       t.value
FROM training_samples t
JOIN training_series s ON s.id = t.series_id
JOIN hosts h ON h.id = s.host_id;
