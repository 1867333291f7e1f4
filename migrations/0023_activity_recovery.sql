-- 0023: GPU activity from GPM beside tensor-pipe activity, and the driver's recovery action.
-- Activity, in percent of the interval since the GPU's previous sample: `sm_active_pct` (NVML_GPM_METRIC_SM_UTIL, the SMs' time with
-- work; dcgm-exporter's DCGM_FI_PROF_SM_ACTIVE as a 0..1 ratio), `sm_occupancy_pct`
-- (SM_OCCUPANCY; DCGM_FI_PROF_SM_OCCUPANCY) and `dram_active_pct` (DRAM_BW_UTIL;
-- DCGM_FI_PROF_DRAM_ACTIVE). NULL where GPM cannot read them: GPUs before Hopper, drivers
-- without GPM, a GPU's first sample, imported logs.
-- `recovery_action` is what the driver asks for (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
-- nvmlDeviceGpuRecoveryAction_t: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain
-- and reset, 5 recover the IMEX domain, 6 bus reset, 7 system reboot); NULL where the driver
-- does not report it (before R550, boards without row remapping) and in imported logs.

ALTER TABLE samples ADD COLUMN sm_active_pct REAL;
ALTER TABLE samples ADD COLUMN sm_occupancy_pct REAL;
ALTER TABLE samples ADD COLUMN dram_active_pct REAL;
ALTER TABLE samples ADD COLUMN recovery_action INTEGER;

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
       s.process_count, s.tensor_active_pct,
       s.sm_active_pct, s.sm_occupancy_pct, s.dram_active_pct, s.recovery_action
FROM samples s
JOIN gpus g ON g.id = s.gpu_id
JOIN hosts h ON h.id = g.host_id;
