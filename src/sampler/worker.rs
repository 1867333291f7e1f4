//! One thread per GPU: all NVML calls for that GPU happen here, so a call that hangs stalls
//! only this GPU.
//!
//! Invariants: a worker answers each request exactly once (late answers are still sent and
//! discarded by the coordinator); it never calls NVML again after its GPU is lost; it ends
//! when its request channel closes.

use std::sync::Arc;
use std::sync::mpsc::Receiver;

use nvml_wrapper::Nvml;

use crate::model::{GpuInventory, GpuSample, MetricError, SampleStatus, TsMs};

use super::device::{SystemInfo, read_inventory, read_power_limit, read_processes, read_sample};
use super::gpm::TensorReader;
use super::gpu_procs::RawProcess;
use super::mailbox::Mailbox;
use super::support::Support;

#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub tick_id: u64,
    pub ts_ms: TsMs,
    pub refresh_inventory: bool,
    /// Read this tick's metrics (false for the inventory-only request at start-up).
    pub sample: bool,
    pub processes: bool,
}

#[derive(Debug)]
pub struct Response {
    pub index: u32,
    pub tick_id: u64,
    /// Present on the first answer and whenever a refresh finds a change.
    pub inventory: Option<GpuInventory>,
    pub sample: Option<GpuSample>,
    /// The compute processes, when they were asked for and could be read.
    pub processes: Option<Vec<RawProcess>>,
    pub errors: Vec<MetricError>,
    /// Set (once) when the GPU was found lost during this request.
    pub lost: Option<String>,
}

/// Runs the worker loop for GPU `index` until `requests` closes; answers go to `responses`.
pub fn run(
    nvml: Arc<Nvml>,
    index: u32,
    sys: SystemInfo,
    requests: Receiver<Request>,
    responses: Mailbox,
) {
    let mut support = Support::new(&format!("index {index}"));
    let device = match nvml.device_by_index(index) {
        Ok(d) => Some(d),
        Err(e) => {
            support.fail("device_handle", &e);
            None
        }
    };
    let mut inventory: Option<GpuInventory> = None;
    // Read with the inventory (slow-changing), carried on every sample.
    let mut power_limit: Option<u32> = None;
    let mut lost_reported = false;
    let mut tensor = TensorReader::default();
    for req in requests {
        support.begin(req.ts_ms);
        let mut resp = Response {
            index,
            tick_id: req.tick_id,
            inventory: None,
            sample: None,
            processes: None,
            errors: Vec::new(),
            lost: None,
        };
        if let Some(dev) = &device {
            if inventory.is_none() || req.refresh_inventory {
                if inventory.is_some() {
                    support.reprobe();
                    tensor.reprobe();
                }
                let inv = read_inventory(dev, index, &sys, &mut support);
                power_limit = read_power_limit(dev, &mut support);
                if support.lost.is_none()
                    && !inv.uuid.is_empty()
                    && inventory.as_ref() != Some(&inv)
                {
                    support = rename(support, &inv.uuid);
                    inventory = Some(inv.clone());
                    resp.inventory = Some(inv);
                }
            }
            if let Some(inv) = inventory.as_ref().filter(|_| req.sample) {
                let mut sample =
                    read_sample(&nvml, dev, &inv.uuid, req.ts_ms, power_limit, &mut support);
                if sample.status == SampleStatus::Ok {
                    sample.tensor_active_pct = tensor.read(&nvml, dev, &mut support);
                }
                if req.processes && sample.status == SampleStatus::Ok {
                    resp.processes = read_processes(&nvml, dev, &mut support);
                }
                resp.sample = Some(if support.lost.is_some() {
                    GpuSample::empty(req.ts_ms, &inv.uuid, SampleStatus::Lost)
                } else {
                    sample
                });
            }
        }
        if support.lost.is_some() && !lost_reported {
            lost_reported = true;
            resp.lost = support.lost.clone();
        }
        resp.errors = support.take_changed_errors();
        responses.post(resp);
    }
}

/// Carries over the support state under the GPU's real identity once its UUID is known.
fn rename(support: Support, uuid: &str) -> Support {
    let mut s = Support::new(uuid);
    s.lost = support.lost;
    s
}
