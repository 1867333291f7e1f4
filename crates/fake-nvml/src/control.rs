//! Test and demo controls that no real NVML has: the manual clock and the scenario path.
//!
//! - `gpuwatchFakeSetTick(tick) -> nvmlReturn_t`: switch this session to manual time at `tick`
//!   (for the rest of the session, i.e. until the last `nvmlShutdown`); UNINITIALIZED before init.
//! - `gpuwatchFakeGetTick() -> u64`: the current tick (0 when not initialised).
//! - `gpuwatchFakeCallCount() -> u64`: per-device calls answered since the library was loaded
//!   (what benchmarks divide by GPUs and ticks).
//! - `gpuwatchFakeEventsDelivered() -> u64`: events `nvmlEventSetWait_v2` delivered since the
//!   library was loaded (a test waits for its client's event thread to have read one).
//! - `gpuwatchFakeGpmSamplesLive() -> u64`: GPM samples allocated and not yet freed (a client
//!   that leaks them shows here).
//! - `gpuwatchFakeScenarioPath(buf, len) -> nvmlReturn_t`: the scenario file in use (empty for the
//!   built-in default); before init, the file init would load. INSUFFICIENT_SIZE when `len` is
//!   too small for the path and its NUL.
//!
//! Invariants: the controls never change the scenario, only the clock of the current session.

use std::ffi::{c_char, c_uint};

use gpuwatch_sim::nvml::code;

use crate::ffi_types::NvmlReturn;
use crate::{guard, out_str, state};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpuwatchFakeSetTick(tick: u64) -> NvmlReturn {
    guard(|| match state::lock().session.as_mut() {
        Some(s) => {
            s.set_manual_tick(tick);
            state::tick_moved();
            code::SUCCESS
        }
        None => code::UNINITIALIZED,
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpuwatchFakeCallCount() -> u64 {
    state::calls()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpuwatchFakeEventsDelivered() -> u64 {
    crate::events::delivered()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpuwatchFakeGpmSamplesLive() -> u64 {
    std::panic::catch_unwind(crate::gpm::live).unwrap_or(0)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpuwatchFakeGetTick() -> u64 {
    std::panic::catch_unwind(|| state::current_tick().unwrap_or(0)).unwrap_or(0)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpuwatchFakeScenarioPath(buf: *mut c_char, len: c_uint) -> NvmlReturn {
    guard(|| {
        let path = {
            let st = state::lock();
            match st.session.as_ref() {
                Some(s) => s.path.clone(),
                None => {
                    drop(st);
                    state::scenario_location()
                }
            }
        };
        let text = path
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        // SAFETY: `buf` is null (rejected) or holds `len` bytes, per this function's contract.
        unsafe { out_str(buf, len, &text) }
    })
}
