-- The training job a GPU's pod works for by its owner (the kubelet's /pods: its controller's
-- labels and owner references, `[kubernetes] kubelet_pods`): the `training_job` of the
-- GPU's alerts and fleet series (docs/FLEET.md). NULL: not asked, or the pod names none.
ALTER TABLE gpu_holders ADD COLUMN training_job TEXT;
