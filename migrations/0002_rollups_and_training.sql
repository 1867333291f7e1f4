-- 0002_rollups_and_training: 1-minute rollups of samples, rollup progress, training metrics.

-- One row per GPU and minute that had at least one sample. For each metric X:
-- X_min / X_max (INTEGER) and X_avg (REAL) over the non-NULL values of the minute; all three
-- are NULL when every value of the minute was NULL.
CREATE TABLE rollups_1m (
    ts_ms                 INTEGER NOT NULL,  -- minute start
    gpu_id                INTEGER NOT NULL,  -- gpus.id
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
    PRIMARY KEY (ts_ms, gpu_id)
) WITHOUT ROWID;

-- Rollup progress per host: every minute that starts before done_ms has been rolled up.
CREATE TABLE rollup_state (
    host_id INTEGER PRIMARY KEY REFERENCES hosts (id),
    done_ms INTEGER NOT NULL
);

CREATE TABLE training_series (
    id            INTEGER PRIMARY KEY,
    host_id       INTEGER NOT NULL REFERENCES hosts (id),
    name          TEXT    NOT NULL,
    labels_json   TEXT    NOT NULL,  -- JSON object, keys sorted: {"job":"llm-7","rank":"0"}
    first_seen_ms INTEGER NOT NULL,
    UNIQUE (host_id, name, labels_json)
);

CREATE TABLE training_samples (
    ts_ms     INTEGER NOT NULL,
    series_id INTEGER NOT NULL,  -- training_series.id
    value     REAL,
    PRIMARY KEY (ts_ms, series_id)
) WITHOUT ROWID;
