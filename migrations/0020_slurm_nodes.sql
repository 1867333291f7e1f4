-- How many nodes a process's Slurm job spans (SLURM_JOB_NUM_NODES of its environment): a
-- node whose job spans others sends that job's hang alerts through Alertmanager only, where
-- the fleet's GpuwatchJobHang inhibits them (docs/FLEET.md). NULL: not a Slurm job's
-- process, or its environment was not readable.
ALTER TABLE processes ADD COLUMN slurm_nodes INTEGER;
