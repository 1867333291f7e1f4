-- The training job a GPU's pod works for by its owner (the kubelet's /pods: its controller's
-- labels and owner references, `[kubernetes] kubelet_pods`): the `training_job` of the
-- GPU's alerts and fleet series (docs/FLEET.md). NULL: not asked, or the pod names none.
ALTER TABLE gpu_holders ADD COLUMN training_job TEXT;

DROP VIEW gpu_allocations;
CREATE VIEW gpu_allocations AS
SELECT h.name      AS host,
       g.uuid      AS gpu_uuid,
       g.gpu_index AS gpu_index,
       a.pod, a.namespace, a.container, a.resource,
       a.from_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', a.from_ms / 1000.0, 'unixepoch') AS from_utc,
       a.to_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', a.to_ms / 1000.0, 'unixepoch') AS to_utc,
       a.training_job
FROM gpu_holders a
JOIN gpus g ON g.id = a.gpu_id
JOIN hosts h ON h.id = g.host_id;
