-- 0018: `gpu_rollups` reads only the rollups and the UUIDs for what the post-mortem asks most
-- (a GPU's minutes by UUID and time). The view joined `gpus` as an inner join, also matching
-- `g.uuid = u.uuid`, so every row of a week of minutes paid a lookup of its `gpus` row even
-- when no column of it (host, index, name) was selected. The UUID match is what the triggers
-- of 0017 keep (a rollup row's `uuid_id` is its GPU's UUID), and a rollup row's GPU always has
-- a `gpus` row (GPUs are never deleted), so the join adds no condition: as a LEFT JOIN on
-- `gpus.id`, SQLite leaves `gpus` and `hosts` out of a query that selects none of their
-- columns (its omit-noop-join), and joins them as before when it does.

DROP VIEW gpu_rollups;

CREATE VIEW gpu_rollups AS
SELECT r.ts_ms,
       strftime('%Y-%m-%dT%H:%M:%SZ', r.ts_ms / 1000, 'unixepoch') AS minute_utc,
       h.name      AS host,
       u.uuid      AS gpu_uuid,
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
FROM gpu_uuids u
JOIN rollups_1m r ON r.uuid_id = u.id
LEFT JOIN gpus g ON g.id = r.gpu_id
LEFT JOIN hosts h ON h.id = g.host_id;
