-- 0017: the rollups' post-mortem order is (GPU UUID, time). A GPU is a (host, UUID) pair, so
-- one UUID may have several `gpus` rows (the same log imported under two host names, a board
-- moved to another machine); walking `gpus` in UUID order then gives each UUID's rows host by
-- host, and `ORDER BY gpu_uuid, ts_ms` made SQLite sort every UUID's week of minutes again
-- (`USE TEMP B-TREE FOR RIGHT PART OF ORDER BY`). Each distinct UUID now has one row in
-- `gpu_uuids` (kept by a trigger on `gpus`), each rollup row carries its UUID's id, and the
-- covering index `rollups_1m_common` is keyed by (uuid_id, ts_ms, gpu_id): one UUID's minutes,
-- of every host, come out of the index in time order, so the view's UUID-then-time order
-- needs no sort. The table stays keyed by (gpu_id, ts_ms) for the readers that know the GPU.

CREATE TABLE gpu_uuids (
    id   INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE
);
INSERT INTO gpu_uuids (uuid) SELECT DISTINCT uuid FROM gpus ORDER BY uuid;

CREATE TRIGGER gpus_uuid_known AFTER INSERT ON gpus
BEGIN
    INSERT OR IGNORE INTO gpu_uuids (uuid) VALUES (NEW.uuid);
END;

DROP VIEW gpu_rollups;

CREATE TABLE rollups_1m_by_uuid (
    ts_ms                 INTEGER NOT NULL,  -- minute start
    gpu_id                INTEGER NOT NULL,  -- gpus.id
    uuid_id               INTEGER NOT NULL,  -- gpu_uuids.id of the GPU's UUID
    n                     INTEGER NOT NULL,  -- sample rows in the minute (any status)
    n_missed              INTEGER NOT NULL,  -- rows with status deadline_missed
    n_lost                INTEGER NOT NULL,  -- rows with status lost
    util_gpu_min INTEGER, util_gpu_max INTEGER, util_gpu_avg REAL,
    util_mem_min INTEGER, util_mem_max INTEGER, util_mem_avg REAL,
    mem_used_min INTEGER, mem_used_max INTEGER, mem_used_avg REAL,
    temp_min     INTEGER, temp_max     INTEGER, temp_avg     REAL,
    power_min    INTEGER, power_max    INTEGER, power_avg    REAL,
    clock_sm_min INTEGER, clock_sm_max INTEGER, clock_sm_avg REAL,
    clock_mem_min INTEGER, clock_mem_max INTEGER, clock_mem_avg REAL,
    fan_min      INTEGER, fan_max      INTEGER, fan_avg      REAL,
    pcie_tx_min  INTEGER, pcie_tx_max  INTEGER, pcie_tx_avg  REAL,
    pcie_rx_min  INTEGER, pcie_rx_max  INTEGER, pcie_rx_avg  REAL,
    ecc_corrected_max     INTEGER,
    ecc_uncorrected_max   INTEGER,
    throttle_reasons_or   INTEGER,           -- bitwise OR of the minute's masks
    energy_mj_max         INTEGER,           -- energy counter at the end of the minute
    PRIMARY KEY (gpu_id, ts_ms)
) WITHOUT ROWID;

INSERT INTO rollups_1m_by_uuid
SELECT r.ts_ms, r.gpu_id, u.id, r.n, r.n_missed, r.n_lost,
       r.util_gpu_min, r.util_gpu_max, r.util_gpu_avg,
       r.util_mem_min, r.util_mem_max, r.util_mem_avg,
       r.mem_used_min, r.mem_used_max, r.mem_used_avg,
       r.temp_min, r.temp_max, r.temp_avg,
       r.power_min, r.power_max, r.power_avg,
       r.clock_sm_min, r.clock_sm_max, r.clock_sm_avg,
       r.clock_mem_min, r.clock_mem_max, r.clock_mem_avg,
       r.fan_min, r.fan_max, r.fan_avg,
       r.pcie_tx_min, r.pcie_tx_max, r.pcie_tx_avg,
       r.pcie_rx_min, r.pcie_rx_max, r.pcie_rx_avg,
       r.ecc_corrected_max, r.ecc_uncorrected_max, r.throttle_reasons_or, r.energy_mj_max
FROM rollups_1m r
JOIN gpus g ON g.id = r.gpu_id
JOIN gpu_uuids u ON u.uuid = g.uuid
ORDER BY r.gpu_id, r.ts_ms;
DROP TABLE rollups_1m;
ALTER TABLE rollups_1m_by_uuid RENAME TO rollups_1m;
CREATE TRIGGER gpus_uuid_changed AFTER UPDATE OF uuid ON gpus
BEGIN
    INSERT OR IGNORE INTO gpu_uuids (uuid) VALUES (NEW.uuid);
    UPDATE rollups_1m SET uuid_id = (SELECT id FROM gpu_uuids WHERE uuid = NEW.uuid)
     WHERE gpu_id = NEW.id;
END;

CREATE INDEX rollups_1m_common ON rollups_1m (uuid_id, ts_ms, gpu_id, temp_max, mem_used_max,
                                              util_gpu_avg, power_avg);

-- The join order is left to the planner: `g.uuid = u.uuid` (true by construction) lets it
-- start from a GPU filter (`gpu_index`, `host`) as well as from a UUID or from the UUIDs in
-- order.
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
JOIN gpus g ON g.id = r.gpu_id AND g.uuid = u.uuid
LEFT JOIN hosts h ON h.id = g.host_id;
