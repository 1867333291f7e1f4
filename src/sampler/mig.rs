//! MIG instances of a GPU in MIG mode, each read as a GPU of its own: its identity (MIG UUID,
//! GPU instance id, profile), memory, processes and GPM activity. The parent keeps the rest
//! (temperature, power, clocks, hardware health); per-instance utilisation is not available
//! through the classic call, so an instance's activity is GPM's (SM, occupancy, DRAM,
//! tensor), sampled per instance on the parent (`nvmlGpmMigSampleGet`).
//!
//! Invariants: the instances are enumerated at the first read, at every inventory refresh,
//! every [`ENUMERATE_EVERY`] ticks and after an instance's read fails (created or destroyed
//! while running: picked up without a restart); an instance's values are its own or absent
//! (never the parent's); each instance has its own [`Support`] (an instance's NOT_SUPPORTED
//! does not silence its parent's reads) and its own GPM reader (two samples of that instance
//! make a value).

use std::collections::HashMap;

use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper::{Device, Nvml};

use super::gpm::TensorReader;
use super::gpu_procs::{RawProcess, compute_processes};
use super::support::Support;
use crate::model::{GpuInventory, GpuSample, MetricError, MigInstance, SampleStatus, TsMs};

/// Ticks between two enumerations of a GPU's instances.
pub const ENUMERATE_EVERY: u32 = 10;

/// One instance's reading of a tick.
#[derive(Debug)]
pub struct Instance {
    /// Present when new or changed.
    pub inventory: Option<GpuInventory>,
    pub sample: GpuSample,
    pub processes: Option<Vec<RawProcess>>,
}

struct Known<'n> {
    device: Device<'n>,
    inventory: GpuInventory,
    reported: bool,
    tensor: TensorReader<'n>,
    support: Support,
}

/// The instances of one GPU, as this lane knows them.
#[derive(Default)]
pub struct MigReader<'n> {
    /// By MIG UUID.
    known: HashMap<String, Known<'n>>,
    /// The UUIDs in enumeration order.
    order: Vec<String>,
    since_enumerated: Option<u32>,
}

/// `nvmlDeviceGetGpuInstanceId` of a MIG device (nvml-wrapper lacks it).
fn gpu_instance_id(nvml: &Nvml, dev: &Device<'_>) -> Result<u32, NvmlError> {
    let sym = nvml
        .lib()
        .nvmlDeviceGetGpuInstanceId
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    let mut id = 0u32;
    // SAFETY: a valid handle and a valid out-pointer.
    nvml_try(unsafe { sym(dev.handle(), &mut id) })?;
    Ok(id)
}

/// The profile in a MIG device's name: `NVIDIA H100 80GB HBM3 MIG 1g.10gb` → `1g.10gb`.
pub fn profile_of(name: &str) -> Option<&str> {
    name.rsplit_once(" MIG ")
        .map(|(_, p)| p.trim())
        .filter(|p| !p.is_empty())
}

impl<'n> MigReader<'n> {
    /// Forgets every instance (an inventory refresh after a reset, MIG mode changed).
    pub fn reprobe(&mut self) {
        self.known.clear();
        self.order.clear();
        self.since_enumerated = None;
    }

    /// Lists the parent's instances; keeps what is known of those still there.
    fn enumerate(
        &mut self,
        nvml: &'n Nvml,
        parent: &Device<'n>,
        inv: &GpuInventory,
        s: &mut Support,
    ) {
        self.since_enumerated = Some(0);
        let Some(count) = s.read("mig_device_count", || parent.mig_device_count()) else {
            return;
        };
        let mut order = Vec::new();
        for i in 0..count {
            let dev = match parent.mig_device_by_index(i) {
                Ok(d) => d,
                // No instance at this index: fine, the count is a maximum.
                Err(NvmlError::NotFound | NvmlError::InvalidArg) => continue,
                Err(e) => {
                    s.fail("mig_device", &e);
                    continue;
                }
            };
            let Ok(uuid) = dev.uuid() else { continue };
            if !self.known.contains_key(&uuid) {
                let Ok(gi) = gpu_instance_id(nvml, &dev) else {
                    continue;
                };
                let name = dev.name().ok();
                let profile = name
                    .as_deref()
                    .and_then(profile_of)
                    .unwrap_or("unknown")
                    .to_string();
                let inventory = GpuInventory {
                    index: inv.index,
                    uuid: uuid.clone(),
                    name,
                    driver_version: inv.driver_version.clone(),
                    cuda_driver_version: inv.cuda_driver_version,
                    nvml_version: inv.nvml_version.clone(),
                    memory_total_bytes: dev.memory_info().ok().map(|m| m.total),
                    mig_mode: Some(true),
                    mig: Some(MigInstance {
                        gpu_instance_id: gi,
                        profile,
                        parent_uuid: inv.uuid.clone(),
                    }),
                    ..GpuInventory::default()
                };
                self.known.insert(
                    uuid.clone(),
                    Known {
                        device: dev,
                        inventory,
                        reported: false,
                        tensor: TensorReader::default(),
                        support: Support::new(&uuid),
                    },
                );
            }
            order.push(uuid);
        }
        self.known.retain(|u, _| order.contains(u));
        self.order = order;
    }

    /// One tick of every instance of `parent` (whose inventory is `inv`).
    #[allow(clippy::too_many_arguments)]
    pub fn read(
        &mut self,
        nvml: &'n Nvml,
        parent: &Device<'n>,
        inv: &GpuInventory,
        ts_ms: TsMs,
        processes: bool,
        refresh: bool,
        s: &mut Support,
        errors: &mut Vec<MetricError>,
    ) -> Vec<Instance> {
        let due = self
            .since_enumerated
            .is_none_or(|n| n + 1 >= ENUMERATE_EVERY);
        if refresh || due {
            self.enumerate(nvml, parent, inv, s);
        } else if let Some(n) = self.since_enumerated.as_mut() {
            *n += 1;
        }
        let mut out = Vec::new();
        let mut gone = false;
        for uuid in &self.order {
            let Some(k) = self.known.get_mut(uuid) else {
                continue;
            };
            let Some(gi) = k.inventory.mig.as_ref().map(|m| m.gpu_instance_id) else {
                continue;
            };
            k.support.begin(ts_ms);
            let mem = match k.device.memory_info() {
                Ok(m) => Some(m),
                // Destroyed since the enumeration: enumerate again next tick.
                Err(NvmlError::NotFound | NvmlError::InvalidArg) => {
                    gone = true;
                    continue;
                }
                Err(e) => {
                    k.support.fail("memory_info", &e);
                    None
                }
            };
            let act = k.tensor.read_mig(nvml, parent, gi, &mut k.support);
            let procs = if processes {
                let dev = &k.device;
                k.support
                    .read("compute_processes", || compute_processes(dev, nvml))
            } else {
                None
            };
            let mut sample = GpuSample::empty(ts_ms, uuid, SampleStatus::Ok);
            sample.mem_used_bytes = mem.as_ref().map(|m| m.used);
            sample.mem_free_bytes = mem.as_ref().map(|m| m.free);
            sample.mem_total_bytes = mem.as_ref().map(|m| m.total);
            sample.sm_active_pct = act.sm_active;
            sample.sm_occupancy_pct = act.sm_occupancy;
            sample.dram_active_pct = act.dram_active;
            sample.tensor_active_pct = act.tensor_active;
            let inventory = (!k.reported).then(|| k.inventory.clone());
            k.reported = true;
            errors.extend(k.support.take_changed_errors());
            out.push(Instance {
                inventory,
                sample,
                processes: procs,
            });
        }
        if gone {
            self.since_enumerated = None;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::profile_of;

    #[test]
    fn the_profile_is_the_end_of_the_mig_devices_name() {
        assert_eq!(
            profile_of("NVIDIA H100 80GB HBM3 MIG 1g.10gb"),
            Some("1g.10gb")
        );
        assert_eq!(
            profile_of("NVIDIA A100-SXM4-40GB MIG 3g.20gb"),
            Some("3g.20gb")
        );
        assert_eq!(profile_of("NVIDIA H100 80GB HBM3"), None);
    }
}
