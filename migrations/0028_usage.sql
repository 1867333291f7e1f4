-- 0028: the usage ledger (docs/USAGE.md). Per GPU (a MIG instance is a GPU of its own) and
-- interval, who held it and how it was used: a new row when the holder or the state changes,
-- never one per tick, and a new row at each UTC midnight, so that a row lies within one day.
-- A GPU shared by several holders (time-slicing) has one row per holder for the interval,
-- each with `share` = 1/holders. `end_ms` NULL: the GPU's current (open) row, which lasts up
-- to the GPU's newest sample (`gpus.last_sample_ms`). Kept as long as the rollups.

CREATE TABLE usage_intervals (
    ts_ms        INTEGER NOT NULL,   -- start (ms since the epoch, UTC)
    gpu_id       INTEGER NOT NULL,   -- gpus.id
    holder_no    INTEGER NOT NULL,   -- 0.. among the interval's holders
    end_ms       INTEGER,            -- NULL: open
    state        TEXT    NOT NULL CHECK (state IN ('busy', 'idle_held', 'free', 'unknown')),
    share        REAL    NOT NULL,   -- the holder's part of the GPU: 1 / holders
    namespace    TEXT,
    pod          TEXT,
    container    TEXT,
    slurm_job    TEXT,
    user         TEXT,
    training_job TEXT,
    PRIMARY KEY (gpu_id, ts_ms, holder_no)
) WITHOUT ROWID;

CREATE INDEX usage_intervals_ts ON usage_intervals (ts_ms);

-- One row per GPU, interval and holder, with its length in seconds and the GPU-seconds that
-- are the holder's (`seconds * share`); the open row runs to the GPU's newest sample.
CREATE VIEW gpu_usage AS
SELECT h.name AS host,
       g.uuid AS gpu_uuid,
       g.gpu_index,
       g.gpu_instance_id,
       g.name AS model,
       u.ts_ms AS from_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', u.ts_ms / 1000.0, 'unixepoch') AS from_utc,
       coalesce(u.end_ms, max(u.ts_ms, coalesce(g.last_sample_ms, u.ts_ms))) AS to_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ',
                coalesce(u.end_ms, max(u.ts_ms, coalesce(g.last_sample_ms, u.ts_ms))) / 1000.0,
                'unixepoch') AS to_utc,
       u.end_ms IS NULL AS open,
       u.state, u.share,
       u.namespace, u.pod, u.container, u.slurm_job, u.user, u.training_job,
       (coalesce(u.end_ms, max(u.ts_ms, coalesce(g.last_sample_ms, u.ts_ms))) - u.ts_ms) / 1000.0
         AS seconds,
       (coalesce(u.end_ms, max(u.ts_ms, coalesce(g.last_sample_ms, u.ts_ms))) - u.ts_ms) / 1000.0
         * u.share AS gpu_seconds
FROM usage_intervals u
JOIN gpus g ON g.id = u.gpu_id
JOIN hosts h ON h.id = g.host_id;

-- The ledger by UTC day, GPU, holder and state (rows never cross midnight).
CREATE VIEW usage_daily AS
SELECT date(from_ms / 1000, 'unixepoch') AS day,
       host, gpu_uuid, gpu_index, gpu_instance_id, model, state,
       namespace, pod, container, slurm_job, user, training_job,
       sum(gpu_seconds) / 3600.0 AS gpu_hours
FROM gpu_usage
GROUP BY day, host, gpu_uuid, state, namespace, pod, container, slurm_job, user, training_job;

-- The usage digests enqueued (`[usage] digest`): one row per period, written in the
-- transaction that queues its notifications, so a period is sent once across restarts.
CREATE TABLE usage_digests (
    period_end_ms   INTEGER PRIMARY KEY,
    period_start_ms INTEGER NOT NULL,
    created_ms      INTEGER NOT NULL
);
