-- 0008: whether processes were observed. `samples.process_count` is the number of compute
-- processes NVML listed for the GPU at that sample, NULL when the process list was not
-- observed (process sampling off, the query failed or is unsupported, another PID namespace,
-- an imported log without --query-compute-apps rows). Unknown is not "no processes": rules
-- see no data for `process_count` where it is NULL.

ALTER TABLE samples ADD COLUMN process_count INTEGER;

-- Rows written before this version did not say. A GPU with process rows had its processes
-- listed; its ok samples get their counts (0 where none). Other GPUs stay unknown (an
-- imported log without process rows, or a GPU no process ever used).
UPDATE samples SET process_count = 0
WHERE status = 0 AND gpu_id IN (SELECT DISTINCT gpu_id FROM process_samples);
UPDATE samples SET process_count = c.n
FROM (SELECT ts_ms, gpu_id, count(*) AS n FROM process_samples GROUP BY ts_ms, gpu_id) AS c
WHERE samples.ts_ms = c.ts_ms AND samples.gpu_id = c.gpu_id AND samples.status = 0;

DROP VIEW gpu_samples;
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
       s.remap_pending, s.remap_failure,
       s.process_count
FROM samples s
JOIN gpus g ON g.id = s.gpu_id
JOIN hosts h ON h.id = g.host_id;
