//! Shared by the attribution tests: two GPUs' UUIDs and the kubelet's answer that allocates
//! them to two pods (`research/llm-ft-7` and `prod-eval/eval-3`, container `trainer`).

#![allow(dead_code)]

use gpuwatch::attribution::kubelet::proto;

/// The UUIDs of the two simulated GPUs (the notify rig's scenario uses the same).
pub const UUIDS: [&str; 2] = [
    "GPU-5a7f9c2e-1b3d-4e6f-8a9b-0c1d2e3f4a5b",
    "GPU-6b8fad3f-2c4e-4f70-9bac-1d2e3f4a5b6c",
];

/// The kubelet's answer allocating each (pod, namespace, GPU UUID) to container `trainer`.
pub fn allocations(pods: &[(&str, &str, &str)]) -> proto::ListPodResourcesResponse {
    proto::ListPodResourcesResponse {
        pod_resources: pods
            .iter()
            .map(|(name, ns, uuid)| proto::PodResources {
                name: name.to_string(),
                namespace: ns.to_string(),
                containers: vec![proto::ContainerResources {
                    name: "trainer".into(),
                    devices: vec![proto::ContainerDevices {
                        resource_name: "nvidia.com/gpu".into(),
                        device_ids: vec![uuid.to_string()],
                    }],
                }],
            })
            .collect(),
    }
}

/// GPU 0 → `research/llm-ft-7`, GPU 1 → `prod-eval/eval-3`, both in container `trainer`.
pub fn two_pods() -> proto::ListPodResourcesResponse {
    allocations(&[
        ("llm-ft-7", "research", UUIDS[0]),
        ("eval-3", "prod-eval", UUIDS[1]),
    ])
}
