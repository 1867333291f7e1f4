//! Event sets: create, register devices, wait for XID events, free.
//!
//! Invariants:
//! - An event set remembers, per registered GPU, the mask and the tick of registration; only
//!   XID events of registered GPUs with the XID bit, at or after that tick, are delivered.
//! - `nvmlEventSetWait_v2` delivers one pending event per call, oldest first; with none pending it
//!   re-checks every 50 ms (manual clock) or 250 ms (wall clock) (wall-clock ticks advance, and another thread may advance a
//!   manual tick) until the timeout, then answers TIMEOUT. The state lock is never held while
//!   sleeping.
//! - Handles are small integers (`SET_BASE + id`), validated against the live sets.

use std::collections::VecDeque;
use std::ffi::{c_uint, c_ulonglong, c_void};
use std::time::{Duration, Instant};

use gpuwatch_sim::XidEvent;
use gpuwatch_sim::nvml::{code, event_type};

use crate::ffi_types::{EventData, NO_INSTANCE, NvmlDevice, NvmlEventSet, NvmlReturn};
use crate::{device_call, guard, handle_for, out, state};

const SET_BASE: usize = 0xE7E0_0000;

/// Events `nvmlEventSetWait_v2` delivered since load (`gpuwatchFakeEventsDelivered`).
static DELIVERED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Events delivered since load: a test waits on it instead of on the event thread's timing.
pub fn delivered() -> u64 {
    DELIVERED.load(std::sync::atomic::Ordering::Acquire)
}

#[derive(Debug, Default)]
pub struct EventSet {
    /// `(gpu, mask, registration tick)`.
    registered: Vec<(usize, u64, u64)>,
    /// Events up to this tick have been moved into `pending` (or skipped).
    checked_to: Option<u64>,
    pending: VecDeque<XidEvent>,
}

impl EventSet {
    fn wants(&self, e: &XidEvent) -> bool {
        self.registered.iter().any(|&(g, mask, since)| {
            g == e.gpu && mask & event_type::XID_CRITICAL != 0 && e.tick >= since
        })
    }
}

fn set_id(set: NvmlEventSet) -> usize {
    (set as usize).wrapping_sub(SET_BASE)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut NvmlEventSet) -> NvmlReturn {
    guard(|| {
        let mut st = state::lock();
        let Some(session) = st.session.as_mut() else {
            return code::UNINITIALIZED;
        };
        if set.is_null() {
            return code::INVALID_ARGUMENT;
        }
        let id = session.next_set_id;
        session.next_set_id += 1;
        session.event_sets.insert(id, EventSet::default());
        // SAFETY: checked non-null; the caller passes a writable nvmlEventSet_t.
        unsafe { out(set, (SET_BASE + id) as *mut c_void) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetFree(set: NvmlEventSet) -> NvmlReturn {
    guard(|| {
        let mut st = state::lock();
        let Some(session) = st.session.as_mut() else {
            return code::UNINITIALIZED;
        };
        match session.event_sets.remove(&set_id(set)) {
            Some(_) => code::SUCCESS,
            None => code::INVALID_ARGUMENT,
        }
    })
}

/// Event types a GPU can deliver: XID, p-state and clock changes, plus ECC events where the
/// board has ECC.
fn supported_types(d: &crate::Device) -> u64 {
    let mut types = event_type::XID_CRITICAL | event_type::PSTATE | event_type::CLOCK;
    if d.scenario.supports(d.index, "nvmlDeviceGetTotalEccErrors") {
        types |= event_type::SINGLE_BIT_ECC | event_type::DOUBLE_BIT_ECC;
    }
    types
}

getter!(nvmlDeviceGetSupportedEventTypes, c_ulonglong, |d| {
    supported_types(d)
});

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    device: NvmlDevice,
    types: c_ulonglong,
    set: NvmlEventSet,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceRegisterEvents", |d| {
        if types & !supported_types(d) != 0 {
            return code::NOT_SUPPORTED;
        }
        let mut st = state::lock();
        let Some(session) = st.session.as_mut() else {
            return code::UNINITIALIZED;
        };
        let Some(es) = session.event_sets.get_mut(&set_id(set)) else {
            return code::INVALID_ARGUMENT;
        };
        match es.registered.iter_mut().find(|(g, _, _)| *g == d.index) {
            Some(entry) => entry.1 |= types,
            None => es.registered.push((d.index, types, d.tick)),
        }
        code::SUCCESS
    })
}

/// Move newly due events into the set's queue and pop one. `Err` is an NVML code.
/// When a wall-clock session's next event is due (`None`: a manual clock, or no more events).
fn next_event_at() -> Option<Instant> {
    let st = state::lock();
    let session = st.session.as_ref()?;
    let next = session.scenario.next_event_tick(session.tick())?;
    session.wall_time_of(next)
}

fn next_event(set: NvmlEventSet) -> Result<Option<XidEvent>, NvmlReturn> {
    let mut st = state::lock();
    let session = st.session.as_mut().ok_or(code::UNINITIALIZED)?;
    let now = session.tick();
    let scenario = std::sync::Arc::clone(&session.scenario);
    let es = session
        .event_sets
        .get_mut(&set_id(set))
        .ok_or(code::INVALID_ARGUMENT)?;
    if es.checked_to.is_none_or(|c| c < now) {
        let due: Vec<XidEvent> = scenario.events_between(es.checked_to, now);
        for e in due {
            if es.wants(&e) {
                es.pending.push_back(e);
            }
        }
        es.checked_to = Some(now);
    }
    Ok(es.pending.pop_front())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: NvmlEventSet,
    data: *mut EventData,
    timeout_ms: c_uint,
) -> NvmlReturn {
    guard(|| {
        if data.is_null() {
            return if state::current_tick().is_some() {
                code::INVALID_ARGUMENT
            } else {
                code::UNINITIALIZED
            };
        }
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
        loop {
            match next_event(set) {
                Err(c) => return c,
                Ok(Some(e)) => {
                    let ev = EventData {
                        device: handle_for(e.gpu),
                        event_type: event_type::XID_CRITICAL,
                        event_data: e.xid,
                        gpu_instance_id: NO_INSTANCE,
                        compute_instance_id: NO_INSTANCE,
                    };
                    // SAFETY: checked non-null; the caller passes a writable nvmlEventData_t.
                    let written = unsafe { out(data, ev) };
                    DELIVERED.fetch_add(1, std::sync::atomic::Ordering::Release);
                    return written;
                }
                Ok(None) => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return code::TIMEOUT;
            }
            // A manual clock moves when the caller says (and wakes this wait); a wall
            // clock's next event time is known: sleep until then, as the driver blocks until
            // an event.
            let wait =
                next_event_at().map_or(deadline - now, |at| at.saturating_duration_since(now));
            state::wait_for_tick_change(wait.min(deadline - now));
        }
    })
}
