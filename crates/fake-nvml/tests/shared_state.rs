//! Settings shared between processes through `GPUWATCH_FAKE_STATE_DIR`, as a real driver
//! shares them: two copies of the library (two instances, like two processes) see each
//! other's changes, the state outlives a session, and concurrent setters of different keys
//! lose nothing.
//!
//! Its own test binary with one test: the environment variable is process-wide and read at
//! init, so no other test may load the library meanwhile.

mod support;

use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::enums::device::GpuLockedClocksSetting;
use support::Fake;

const ONE_GPU: &str = "[scenario]\nprivileged = true\n[[gpu]]\nmodel = \"H100-SXM-80GB\"\n";

#[test]
fn two_instances_share_the_settings_of_a_state_directory() {
    let state = tempfile::tempdir().expect("tempdir");
    // SAFETY: the only test of this binary; no other thread reads the environment now.
    unsafe { std::env::set_var("GPUWATCH_FAKE_STATE_DIR", state.path()) };
    let (a, b) = (Fake::with(ONE_GPU), Fake::with(ONE_GPU));
    let (na, nb) = (a.nvml(), b.nvml());
    let mut da = na.device_by_index(0).expect("handle");
    let mut db = nb.device_by_index(0).expect("handle");
    assert_eq!(db.power_management_limit().expect("limit"), 700_000);

    da.set_power_management_limit(500_000).expect("set in A");
    assert_eq!(db.power_management_limit().expect("seen by B"), 500_000);
    a.set_tick(0);
    db.set_gpu_locked_clocks(GpuLockedClocksSetting::Numeric {
        min_clock_mhz: 1400,
        max_clock_mhz: 1600,
    })
    .expect("lock in B");
    assert_eq!(da.clock_info(Clock::SM).expect("held in A"), 1400);

    // Concurrent setters of different keys: each keeps the other's.
    std::thread::scope(|s| {
        s.spawn(|| {
            for on in [false, true, false] {
                da.set_persistent(on).expect("persistence");
            }
        });
        s.spawn(|| {
            for w in [300_000, 400_000, 450_000] {
                db.set_power_management_limit(w).expect("limit");
            }
        });
    });
    drop(na);
    // A new session (a new process) starts from the shared state, not the scenario.
    let na = a.nvml();
    let da = na.device_by_index(0).expect("handle");
    assert_eq!(da.power_management_limit().expect("limit"), 450_000);
    assert!(!da.is_in_persistent_mode().expect("persistence"));
    assert_eq!(da.clock_info(Clock::SM).expect("still locked"), 1400);
    unsafe { std::env::remove_var("GPUWATCH_FAKE_STATE_DIR") };
}
