-- How many nodes a process's Slurm job spans (SLURM_JOB_NUM_NODES of its environment): a
-- node whose job spans others sends that job's hang alerts through Alertmanager only, where
-- the fleet's GpuwatchJobHang inhibits them (docs/FLEET.md). NULL: not a Slurm job's
-- process, or its environment was not readable.
ALTER TABLE processes ADD COLUMN slurm_nodes INTEGER;

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
       p.unit, p.placement_known, p.slurm_nodes
FROM process_samples ps
JOIN processes p ON p.id = ps.process_id
JOIN gpus g ON g.id = ps.gpu_id
JOIN hosts h ON h.id = g.host_id;
