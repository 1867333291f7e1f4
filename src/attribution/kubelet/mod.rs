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
                    out.insert(
                        id.clone(),
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

/// `nvidia.com/gpu`, `nvidia.com/mig-…`, and the shared/renamed forms of the device plugin
/// (`nvidia.com/gpu.shared`).
fn is_gpu_resource(name: &str) -> bool {
    name.starts_with("nvidia.com/")
}
