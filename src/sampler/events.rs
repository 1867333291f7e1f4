//! XID and other critical events through NVML's event API, on a thread of their own.
//!
//! Invariants: the thread waits with a 10 s timeout (a wake-up every 10 s at most; it is not
//! joined, so a stopping daemon never waits for it) and ends at the first timeout after
//! shutdown; a GPU whose
//! registration fails is logged and skipped (others still report); if the wait call hangs in
//! the driver, only this thread is stuck.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;

use crate::model::Event;

use super::nvml::error_text;
use crate::telemetry::XidWatch;

/// Spawns the event thread for `count` GPUs. Events are sent with `ts_ms` = 0: the
/// coordinator stamps them with the tick that picks them up.
pub fn spawn(
    nvml: Arc<Nvml>,
    count: u32,
    stop: Arc<AtomicBool>,
    out: Sender<Event>,
    watch: Arc<XidWatch>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("gpuwatch-nvml-events".into())
        .spawn(move || {
            run(&nvml, count, &stop, &out, &watch);
            // However it ended, no XID arrives any more.
            watch.set(Vec::new());
        })
}

fn run(nvml: &Nvml, count: u32, stop: &AtomicBool, out: &Sender<Event>, watch: &XidWatch) {
    let wanted = EventTypes::CRITICAL_XID_ERROR;
    let mut good: Vec<u32> = Vec::new();
    for index in 0..count {
        let Ok(dev) = nvml.device_by_index(index) else {
            continue;
        };
        let supported = dev.supported_event_types().unwrap_or(EventTypes::empty());
        if supported.contains(wanted) {
            good.push(index);
        } else {
            tracing::info!(index, "GPU does not report XID events");
        }
    }
    // A failed registration consumes the set: start again without the GPU that failed.
    let set = loop {
        let mut set = Some(match nvml.create_event_set() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %error_text(&e), "NVML events unavailable; XIDs will not be recorded");
                return;
            }
        });
        let mut failed = None;
        for &index in &good {
            let (Ok(dev), Some(current)) = (nvml.device_by_index(index), set.take()) else {
                continue;
            };
            match dev.register_events(wanted, current) {
                Ok(s) => set = Some(s),
                Err(e) => {
                    tracing::warn!(index, error = %error_text(&e.error), "cannot register for XID events");
                    failed = Some(index);
                    break;
                }
            }
        }
        match (failed, set) {
            (None, Some(set)) => break set,
            (None, None) => return,
            (Some(i), _) => good.retain(|&g| g != i),
        }
    };
    if good.is_empty() {
        return;
    }
    watch.set(good.clone());
    while !stop.load(Ordering::Relaxed) {
        match set.wait(10_000) {
            Ok(ev) => {
                let uuid = ev.device.uuid().ok();
                let xid = match ev.event_data {
                    Some(XidError::Value(v)) => Some(v as i64),
                    _ => None,
                };
                let message = match xid {
                    Some(x) => format!(
                        "XID {x}: {}",
                        crate::xid::lookup(x).map_or(crate::xid::NOT_IN_CATALOGUE, |e| e.meaning)
                    ),
                    None => "XID (unknown number)".to_string(),
                };
                let event = Event {
                    ts_ms: 0,
                    gpu_uuid: uuid,
                    kind: "xid".into(),
                    code: xid,
                    message,
                    source: Some(crate::model::EventSource::Nvml),
                    ..Event::default()
                };
                if out.send(event).is_err() {
                    return;
                }
            }
            Err(NvmlError::Timeout) => {}
            Err(e) => {
                tracing::warn!(error = %error_text(&e), "NVML event wait failed; XID collection stops");
                return;
            }
        }
    }
}
