//! GPU → pod from the kubelet's pod-resources API: which pod, namespace and container the
//! NVIDIA device plugin allocated each GPU (or MIG device) to. This works when no process is
//! visible at all (another PID namespace, a pod between steps).
//!
//! Invariants: one `List` call per refresh, bounded by a deadline (a hanging or restarting
//! kubelet costs at most that, never a tick); a failed refresh keeps no stale answer as
//! fresh — the caller is told, logs it once, and labels fall back to what cgroups give;
//! device ids are matched exactly (GPU UUIDs `GPU-…`, MIG UUIDs `MIG-…`), other resources
//! (CPUs, memory, NICs) are ignored.

pub mod client;
pub mod pods;
pub mod proto;
pub mod server;
#[cfg(test)]
mod tests;
pub mod watch;

use std::collections::HashMap;

/// Who a GPU is allocated to.
pub type Allocation = crate::model::GpuHolder;

/// Device id (GPU or MIG UUID) → its allocation.
pub type Allocations = HashMap<String, Allocation>;

/// The allocations in a `List` answer: every device id of an NVIDIA resource.
pub fn allocations(resp: &proto::ListPodResourcesResponse) -> Allocations {
    let mut out = Allocations::new();
    for pod in &resp.pod_resources {
        for c in &pod.containers {
            for d in c
                .devices
                .iter()
                .filter(|d| is_gpu_resource(&d.resource_name))
            {
                for id in &d.device_ids {
                    // Time-slicing's replicas (`GPU-…::3`) are the GPU itself. Pods sharing
                    // a GPU this way are told apart by their processes; the allocation names
                    // the first pod listed (the answer's order is the kubelet's).
                    let uuid = device_uuid(id);
                    if out.contains_key(uuid) {
                        continue;
                    }
                    out.insert(
                        uuid.to_string(),
                        Allocation {
                            pod: pod.name.clone(),
                            namespace: pod.namespace.clone(),
                            container: c.name.clone(),
                            resource: d.resource_name.clone(),
                            job: None,
                        },
                    );
                }
            }
        }
    }
    out
}

/// The GPU (or MIG) UUID of a device id: the NVIDIA device plugin's time-slicing replicas
/// are `<uuid>::<n>`.
fn device_uuid(id: &str) -> &str {
    match id.rsplit_once("::") {
        Some((uuid, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => uuid,
        _ => id,
    }
}

/// `nvidia.com/gpu`, `nvidia.com/mig-…`, and the shared/renamed forms of the device plugin
/// (`nvidia.com/gpu.shared`).
fn is_gpu_resource(name: &str) -> bool {
    name.starts_with("nvidia.com/")
}
