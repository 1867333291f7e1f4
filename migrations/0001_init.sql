-- 0001_init: hosts, GPU inventory, raw samples, processes, events, metric errors, meta.
--
-- Conventions (see docs/SCHEMA.md):
-- * every timestamp is INTEGER milliseconds since the Unix epoch, UTC (`*_ms`);
-- * a NULL metric means "not read" (unsupported, failed, timed out); a real 0 is stored as 0;
-- * units are in the column names (bytes, mw, mj, c, mhz, pct, kbs);
-- * raw time series are WITHOUT ROWID tables keyed time-first, so the ring buffer deletes the
--   oldest rows from the left edge of the b-tree and appends on the right edge.
-- These tables are private; users query the views (0003_views.sql).

PRAGMA application_id = 1196447063; -- 0x47505557, "GPUW"

CREATE TABLE schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_ms INTEGER NOT NULL
);

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE hosts (
    id            INTEGER PRIMARY KEY,
    name          TEXT    NOT NULL UNIQUE,
    -- oldest and newest timestamp written for this host (NULL before the first write);
    -- retention counts back from last_seen_ms
    first_seen_ms INTEGER,
    last_seen_ms  INTEGER,
    -- no raw row of this host is older than this: lowered by writes, raised by retention
    raw_floor_ms  INTEGER
);

CREATE TABLE gpus (
    id                  INTEGER PRIMARY KEY,
    host_id             INTEGER NOT NULL REFERENCES hosts (id),
    uuid                TEXT    NOT NULL,
    gpu_index           INTEGER,           -- NULL until an inventory report arrives
    name                TEXT,
    serial              TEXT,
    pci_bus_id          TEXT,
    driver_version      TEXT,
    cuda_driver_version INTEGER,           -- e.g. 12040 for 12.4
    nvml_version        TEXT,
    memory_total_bytes  INTEGER,
    power_limit_mw      INTEGER,
    power_limit_min_mw  INTEGER,
    power_limit_max_mw  INTEGER,
    temp_slowdown_c     INTEGER,
    temp_shutdown_c     INTEGER,
    temp_gpu_max_c      INTEGER,
    pcie_max_gen        INTEGER,
    pcie_max_width      INTEGER,
    persistence_mode    INTEGER,           -- 0/1
    mig_mode            INTEGER,           -- 0/1
    first_seen_ms       INTEGER NOT NULL,
    last_seen_ms        INTEGER NOT NULL,  -- newest inventory report or sample
    last_sample_ms      INTEGER,           -- ts_ms of the newest row in samples
    lost_at_ms          INTEGER,           -- first 'lost' sample; NULL again after an 'ok' one
    UNIQUE (host_id, uuid)
);

CREATE TABLE samples (
    ts_ms                       INTEGER NOT NULL,
    gpu_id                      INTEGER NOT NULL,  -- gpus.id
    status                      INTEGER NOT NULL,  -- 0 ok, 1 deadline_missed, 2 lost
    util_gpu_pct                INTEGER,
    util_mem_pct                INTEGER,
    mem_used_bytes              INTEGER,
    mem_free_bytes              INTEGER,
    mem_total_bytes             INTEGER,
    temp_c                      INTEGER,
    fan_pct                     INTEGER,
    clock_sm_mhz                INTEGER,
    clock_mem_mhz               INTEGER,
    power_mw                    INTEGER,
    power_limit_mw              INTEGER,
    energy_mj                   INTEGER,
    pstate                      INTEGER,
    pcie_tx_kbs                 INTEGER,
    pcie_rx_kbs                 INTEGER,
    pcie_gen                    INTEGER,
    pcie_width                  INTEGER,
    throttle_reasons            INTEGER,  -- NVML clock-event bitmask (bit pattern of the u64)
    ecc_corrected               INTEGER,
    ecc_uncorrected             INTEGER,
    retired_pages               INTEGER,
    remapped_rows_correctable   INTEGER,
    remapped_rows_uncorrectable INTEGER,
    remap_pending               INTEGER,  -- 0/1
    remap_failure               INTEGER,  -- 0/1
    PRIMARY KEY (ts_ms, gpu_id)
) WITHOUT ROWID;

CREATE TABLE processes (
    id            INTEGER PRIMARY KEY,
    host_id       INTEGER NOT NULL REFERENCES hosts (id),
    pid           INTEGER NOT NULL,
    start_time_ms INTEGER NOT NULL,  -- 0 when unknown
    name          TEXT,
    cmdline       TEXT,              -- secrets redacted by the sampler
    user          TEXT,
    first_seen_ms INTEGER NOT NULL,
    last_seen_ms  INTEGER NOT NULL,  -- may lag the newest process_samples row by up to 60 s
    UNIQUE (host_id, pid, start_time_ms)
);

CREATE TABLE process_samples (
    ts_ms          INTEGER NOT NULL,
    gpu_id         INTEGER NOT NULL,  -- gpus.id
    process_id     INTEGER NOT NULL,  -- processes.id
    used_mem_bytes INTEGER,
    PRIMARY KEY (ts_ms, gpu_id, process_id)
) WITHOUT ROWID;

CREATE TABLE events (
    id      INTEGER PRIMARY KEY,
    ts_ms   INTEGER NOT NULL,
    host_id INTEGER NOT NULL REFERENCES hosts (id),
    gpu_id  INTEGER REFERENCES gpus (id),  -- NULL for host-wide events
    kind    TEXT    NOT NULL,
    code    INTEGER,
    message TEXT    NOT NULL
);
CREATE INDEX events_ts ON events (ts_ms);

CREATE TABLE metric_errors (
    gpu_id   INTEGER NOT NULL REFERENCES gpus (id),
    metric   TEXT    NOT NULL,
    error    TEXT    NOT NULL,
    count    INTEGER NOT NULL,
    first_ms INTEGER NOT NULL,
    last_ms  INTEGER NOT NULL,
    PRIMARY KEY (gpu_id, metric)
) WITHOUT ROWID;
