-- 0026: MIG instances as GPUs of their own. A MIG instance's row in `gpus` has its MIG UUID
-- (`MIG-…`), its parent's `gpu_index`, its GPU instance id and profile (`1g.10gb`, dcgm-exporter's
-- GPU_I_ID and GPU_I_PROFILE) and its parent's UUID; all NULL on a whole GPU. An instance
-- is addressed as `N/I` (parent index / instance id). `gpu_samples` shows the two columns,
-- `gpu_inventory` all three.

ALTER TABLE gpus ADD COLUMN gpu_instance_id INTEGER;
ALTER TABLE gpus ADD COLUMN gpu_instance_profile TEXT;
ALTER TABLE gpus ADD COLUMN parent_uuid TEXT;

DROP VIEW gpu_samples;
CREATE VIEW gpu_samples AS
SELECT s.ts_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', s.ts_ms / 1000.0, 'unixepoch') AS time_utc,
       h.name      AS host,
       g.uuid      AS gpu_uuid,
       g.gpu_index AS gpu_index,
       g.name      AS gpu_name,
       g.gpu_instance_id, g.gpu_instance_profile,
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
       g.gpu_instance_id, g.gpu_instance_profile, g.parent_uuid,
       g.first_seen_ms, g.last_seen_ms, g.last_sample_ms, g.lost_at_ms,
       g.lost_at_ms IS NOT NULL AS lost,
       strftime('%Y-%m-%dT%H:%M:%fZ', g.last_seen_ms / 1000.0, 'unixepoch') AS last_seen_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', g.first_seen_ms / 1000.0, 'unixepoch') AS first_seen_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', g.last_sample_ms / 1000.0, 'unixepoch') AS last_sample_utc,
       strftime('%Y-%m-%dT%H:%M:%fZ', g.lost_at_ms / 1000.0, 'unixepoch') AS lost_at_utc
FROM gpus g JOIN hosts h ON h.id = g.host_id;
