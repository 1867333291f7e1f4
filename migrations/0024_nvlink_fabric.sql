-- 0024: NVLink and the NVLink fabric.
-- `nvlink_links_up` counts the GPU's active NVLinks and `nvlink_down_mask` names the inactive
-- ones (bit N: link N) among those it has (NVML_FI_DEV_NVLINK_LINK_COUNT); the four error
-- counters are totals over the links since the driver loaded (NVML_FI_DEV_NVLINK_*_TOTAL:
-- dcgm-exporter's DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, _CRC_DATA_, _REPLAY_,
-- _RECOVERY_); `nvlink_kib` is the data moved, KiB, both directions
-- (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX + _RX over all links). All NULL on GPUs without
-- NVLink, in MIG mode, and in imported logs.
-- `fabric_state` is the GPU's fabric registration (nvmlGpuFabricState_t: 1 not started,
-- 2 in progress, 3 completed) and `fabric_status` its result once completed (an
-- nvmlReturn_t, 0 success); NULL outside an NVLink fabric (nvmlDeviceGetGpuFabricInfo
-- NOT_SUPPORTED: GPUs before Hopper, PCIe boards).

ALTER TABLE samples ADD COLUMN nvlink_links_up INTEGER;
ALTER TABLE samples ADD COLUMN nvlink_down_mask INTEGER;
ALTER TABLE samples ADD COLUMN nvlink_crc_flit_errors INTEGER;
ALTER TABLE samples ADD COLUMN nvlink_crc_data_errors INTEGER;
ALTER TABLE samples ADD COLUMN nvlink_replay_errors INTEGER;
ALTER TABLE samples ADD COLUMN nvlink_recovery_errors INTEGER;
ALTER TABLE samples ADD COLUMN nvlink_kib INTEGER;
ALTER TABLE samples ADD COLUMN fabric_state INTEGER;
ALTER TABLE samples ADD COLUMN fabric_status INTEGER;

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
       s.sm_active_pct, s.sm_occupancy_pct, s.dram_active_pct, s.recovery_action,
       s.nvlink_links_up, s.nvlink_down_mask,
       s.nvlink_crc_flit_errors, s.nvlink_crc_data_errors,
       s.nvlink_replay_errors, s.nvlink_recovery_errors, s.nvlink_kib,
       s.fabric_state, s.fabric_status
FROM samples s
JOIN gpus g ON g.id = s.gpu_id
JOIN hosts h ON h.id = g.host_id;
