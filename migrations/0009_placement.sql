-- 0009: where each process runs — its container, Kubernetes pod and Slurm job, from its
-- cgroup (see src/attribution). `placement_known` is 1 when the process's cgroup was read,
-- NULL when it was not (another PID namespace without the host's /proc, exited, imported,
-- simulated): then every placement column is unknown, not "on the host".

ALTER TABLE processes ADD COLUMN placement_known INTEGER;
ALTER TABLE processes ADD COLUMN runtime TEXT;
ALTER TABLE processes ADD COLUMN container_id TEXT;
ALTER TABLE processes ADD COLUMN pod_uid TEXT;
ALTER TABLE processes ADD COLUMN pod TEXT;
ALTER TABLE processes ADD COLUMN namespace TEXT;
ALTER TABLE processes ADD COLUMN container TEXT;
ALTER TABLE processes ADD COLUMN slurm_job INTEGER;
ALTER TABLE processes ADD COLUMN slurm_step TEXT;
ALTER TABLE processes ADD COLUMN slurm_job_name TEXT;
ALTER TABLE processes ADD COLUMN slurm_array TEXT;
ALTER TABLE processes ADD COLUMN unit TEXT;

DROP VIEW gpu_processes;
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
       ps.used_mem_bytes / 1048576.0 AS used_mem_mib,
       strftime('%Y-%m-%dT%H:%M:%fZ', nullif(p.start_time_ms, 0) / 1000.0, 'unixepoch') AS start_time_utc,
       p.pod, p.namespace, p.container, p.container_id, p.runtime, p.pod_uid,
       p.slurm_job, p.slurm_step, p.slurm_job_name, p.slurm_array,
       p.unit, p.placement_known
FROM process_samples ps
JOIN processes p ON p.id = ps.process_id
JOIN gpus g ON g.id = ps.gpu_id
JOIN hosts h ON h.id = g.host_id;

-- Who each GPU was allocated to by the kubelet's device plugin (the pod-resources API), as
-- intervals: `to_ms` NULL while it still is. A GPU with no row at a time had no allocation
-- the kubelet reported (or no kubelet was asked).
CREATE TABLE gpu_holders (
    gpu_id    INTEGER NOT NULL,  -- gpus.id
    from_ms   INTEGER NOT NULL,
    to_ms     INTEGER,
    pod       TEXT NOT NULL,
    namespace TEXT NOT NULL,
    container TEXT NOT NULL,
    resource  TEXT NOT NULL,
    PRIMARY KEY (gpu_id, from_ms)
) WITHOUT ROWID;

CREATE VIEW gpu_allocations AS
SELECT h.name      AS host,
       g.uuid      AS gpu_uuid,
       g.gpu_index AS gpu_index,
       a.pod, a.namespace, a.container, a.resource,
       a.from_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', a.from_ms / 1000.0, 'unixepoch') AS from_utc,
       a.to_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', a.to_ms / 1000.0, 'unixepoch') AS to_utc
FROM gpu_holders a
JOIN gpus g ON g.id = a.gpu_id
JOIN hosts h ON h.id = g.host_id;
