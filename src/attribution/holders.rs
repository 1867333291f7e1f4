//! Puts the kubelet's allocations on the tick: a GPU whose holder changed gets an
//! allocation row, and a process whose cgroup names a pod the pod log directories could not
//! name takes its pod from its GPU's allocation.
//!
//! Invariants: a holder is written when it changes, not every tick; a GPU the kubelet never
//! answered for has no holder (unknown), and a failed refresh changes nothing; the kubelet
//! is poked once per new process on a GPU it has no allocation for, not every tick.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::model::{GpuAllocation, GpuHolder, Placement, TickBatch, TsMs};

use super::kubelet::Allocations;
use super::kubelet::watch::KubeletView;

#[derive(Debug, Default)]
pub struct Holders {
    view: Option<KubeletView>,
    seen_version: u64,
    current: Allocations,
    /// The holder last written per GPU UUID.
    written: HashMap<String, Option<GpuHolder>>,
    /// Processes already seen (pid, start time).
    known: HashSet<(u32, TsMs)>,
    /// Pod-UID processes named from their GPU's holder: the holder and the named placement
    /// (shared by every tick's sample, built once).
    named: HashMap<(u32, TsMs), (GpuHolder, Arc<Placement>)>,
}

impl Holders {
    pub fn new(view: Option<KubeletView>) -> Self {
        Self {
            view,
            ..Self::default()
        }
    }

    /// Applies the newest allocations to `batch`.
    pub fn apply(&mut self, batch: &mut TickBatch) {
        let Some(view) = &self.view else { return };
        if let Some(a) = view.changed_since(&mut self.seen_version) {
            self.current = a;
        }
        if self.seen_version == 0 {
            // The kubelet has not answered yet: holders are unknown, nothing to write.
            return;
        }
        for s in &batch.samples {
            let now = self.current.get(&s.uuid).cloned();
            if self.written.get(&s.uuid) != Some(&now) {
                self.written.insert(s.uuid.clone(), now.clone());
                batch.allocations.push(GpuAllocation {
                    gpu_uuid: s.uuid.clone(),
                    holder: now,
                });
            }
        }
        let mut poke = false;
        for p in &mut batch.processes {
            let key = (p.process.pid, p.process.start_time_ms);
            let holder = self.current.get(&p.gpu_uuid);
            if holder.is_none() && !self.known.contains(&key) {
                poke = true;
            }
            if let (Some(h), Some(pl)) = (holder, p.process.placement.as_mut())
                && pl.pod_uid.is_some()
                && pl.pod.is_none()
            {
                let (_, named) = match self.named.get(&key) {
                    Some(e) if e.0 == *h => e,
                    _ => {
                        let named = Placement {
                            pod: Some(h.pod.clone()),
                            namespace: Some(h.namespace.clone()),
                            container: Some(h.container.clone()),
                            ..(**pl).clone()
                        };
                        self.named.insert(key, (h.clone(), Arc::new(named)));
                        &self.named[&key]
                    }
                };
                *pl = named.clone();
            }
        }

        self.known.clear();
        self.known.extend(
            batch
                .processes
                .iter()
                .map(|p| (p.process.pid, p.process.start_time_ms)),
        );
        if !self.named.is_empty() {
            self.named.retain(|k, _| self.known.contains(k));
        }
        if poke {
            view.poke();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GpuSample, Placement, ProcessInfo, ProcessSample};

    const UID: &str = "7c1e6a4e-2c4b-4d3e-9f1a-0b2c3d4e5f60";

    fn batch(ts: TsMs) -> TickBatch {
        let proc = |pid: u32, gpu: &str, placement: Option<Placement>| ProcessSample {
            ts_ms: ts,
            gpu_uuid: gpu.into(),
            process: ProcessInfo {
                pid,
                start_time_ms: 1,
                placement: placement.map(Arc::new),
                ..ProcessInfo::default()
            },
            used_mem_bytes: None,
        };
        let in_pod = Placement {
            pod_uid: Some(UID.into()),
            ..Placement::default()
        };
        TickBatch {
            ts_ms: ts,
            samples: vec![
                GpuSample::empty(ts, "GPU-0", crate::model::SampleStatus::Ok),
                GpuSample::empty(ts, "GPU-1", crate::model::SampleStatus::Ok),
            ],
            processes: vec![
                proc(10, "GPU-0", Some(in_pod.clone())),
                proc(11, "GPU-1", Some(in_pod)),
                proc(12, "GPU-1", None),
            ],
            ..TickBatch::default()
        }
    }

    #[test]
    fn holders_are_written_on_change_and_name_the_pods_of_pod_processes() {
        let view = KubeletView::detached();
        let mut h = Holders::new(Some(view.clone()));
        let mut b = batch(1000);
        h.apply(&mut b);
        assert!(
            b.allocations.is_empty(),
            "no answer yet: unknown, nothing written"
        );
        let holder = GpuHolder {
            pod: "llm-ft-7".into(),
            namespace: "research".into(),
            container: "trainer".into(),
            resource: "nvidia.com/gpu".into(),
            job: None,
        };
        view.publish(Allocations::from([("GPU-0".to_string(), holder.clone())]));
        let mut b = batch(2000);
        h.apply(&mut b);
        assert_eq!(
            b.allocations,
            vec![
                GpuAllocation {
                    gpu_uuid: "GPU-0".into(),
                    holder: Some(holder.clone())
                },
                GpuAllocation {
                    gpu_uuid: "GPU-1".into(),
                    holder: None
                },
            ]
        );
        let pl = |b: &TickBatch, k: usize| b.processes[k].process.placement.clone();
        assert_eq!(
            pl(&b, 0).and_then(|p| p.pod.clone()),
            Some("llm-ft-7".into()),
            "its GPU's pod"
        );
        assert_eq!(
            pl(&b, 1).and_then(|p| p.pod.clone()),
            None,
            "GPU-1 is allocated to no pod"
        );
        assert_eq!(pl(&b, 2), None, "unknown stays unknown");
        let mut b = batch(3000);
        h.apply(&mut b);
        assert!(b.allocations.is_empty(), "unchanged: nothing written");
        view.publish(Allocations::new());
        let mut b = batch(4000);
        h.apply(&mut b);
        assert_eq!(
            b.allocations,
            vec![GpuAllocation {
                gpu_uuid: "GPU-0".into(),
                holder: None
            }],
            "released"
        );
    }
}
