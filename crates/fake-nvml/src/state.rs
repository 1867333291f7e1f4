//! Library-wide state: the init refcount, the loaded scenario, the clock and the event sets.
//!
//! Invariants:
//! - One `Mutex<State>`; it is held only for bookkeeping, never while sleeping, so a blocked or
//!   waiting call never stalls other threads. Poisoning is ignored (every export catches panics,
//!   and the state stays consistent because each update is a single assignment).
//! - A session exists exactly while the refcount is > 0; the first init after a full shutdown
//!   builds a fresh one (new scenario load, clock from zero, no event sets).
//! - The current tick is `manual` once `gpuwatchFakeSetTick` was called in this session, else
//!   `floor(wall ms since the scenario's time 0 * speed / tick_ms)`; it never depends on how
//!   many calls were made. Time 0 is the session's init, or the Unix time in
//!   `GPUWATCH_FAKE_START_MS` when set (then every process with the same value sees the same
//!   tick, so a restarted daemon finds the GPUs where the scenario is, not back at its start).

use std::collections::HashMap;
use std::ffi::{CStr, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gpuwatch_sim::Scenario;

use crate::events::EventSet;

/// File looked for next to the loaded library when `GPUWATCH_FAKE_SCENARIO` is not set.
pub const SCENARIO_FILE: &str = "gpuwatch-scenario.toml";
pub const ENV_SCENARIO: &str = "GPUWATCH_FAKE_SCENARIO";
pub const ENV_SPEED: &str = "GPUWATCH_FAKE_SPEED";
/// Unix milliseconds of the scenario's time 0 (the wall-clock anchor shared by processes).
pub const ENV_START_MS: &str = "GPUWATCH_FAKE_START_MS";

/// Where the scenario's time 0 is on the wall clock.
#[derive(Debug, Clone, Copy)]
enum Origin {
    /// At this process's init (the default).
    Init(Instant),
    /// At this Unix time in milliseconds (`GPUWATCH_FAKE_START_MS`).
    Unix(i64),
}

impl Origin {
    /// Wall milliseconds since time 0 (0 before it).
    fn elapsed_ms(self) -> f64 {
        match self {
            Origin::Init(start) => start.elapsed().as_secs_f64() * 1000.0,
            Origin::Unix(t0) => (unix_ms_now() - t0).max(0) as f64,
        }
    }

    /// The instant `ms` wall milliseconds after time 0.
    fn instant_at(self, ms: f64) -> Instant {
        let after = |base: Instant, ms: f64| {
            if ms >= 0.0 {
                base + Duration::from_secs_f64(ms / 1000.0)
            } else {
                base.checked_sub(Duration::from_secs_f64(-ms / 1000.0))
                    .unwrap_or(base)
            }
        };
        match self {
            Origin::Init(start) => after(start, ms),
            Origin::Unix(t0) => after(Instant::now(), t0 as f64 + ms - unix_ms_now() as f64),
        }
    }
}

fn unix_ms_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `GPUWATCH_FAKE_START_MS`, when set to Unix milliseconds; a value that is not one is
/// reported on stderr and ignored (time 0 is then the init).
fn origin_at_init() -> Origin {
    let Some(raw) = std::env::var_os(ENV_START_MS).filter(|v| !v.is_empty()) else {
        return Origin::Init(Instant::now());
    };
    match raw.to_str().and_then(|v| v.trim().parse::<i64>().ok()) {
        Some(t0) if t0 >= 0 => Origin::Unix(t0),
        _ => {
            eprintln!(
                "gpuwatch-fake-nvml: {ENV_START_MS}={raw:?} is not Unix milliseconds (e.g. \
                 $(date +%s%3N)); the scenario starts at this process's nvmlInit"
            );
            Origin::Init(Instant::now())
        }
    }
}

pub struct Session {
    pub scenario: Arc<Scenario>,
    /// The file loaded; `None` for the built-in default.
    pub path: Option<PathBuf>,
    origin: Origin,
    speed: f64,
    manual_tick: Option<u64>,
    pub event_sets: HashMap<usize, EventSet>,
    pub next_set_id: usize,
    /// Who may call the setters, decided at init (`settings::privileged_at_init`).
    pub privileged: bool,
    /// `GPUWATCH_FAKE_STATE_DIR`: where the settings live when shared between processes.
    pub state_dir: Option<PathBuf>,
    /// The settings of each GPU when they live in this process (no state directory).
    pub settings: Vec<crate::settings::Settings>,
}

impl Session {
    pub fn tick(&self) -> u64 {
        if let Some(t) = self.manual_tick {
            return t;
        }
        let ms = self.origin.elapsed_ms() * self.speed;
        (ms / self.scenario.tick_ms() as f64).floor() as u64
    }

    /// When wall-clock tick `tick` starts (`None` with a manual clock).
    pub fn wall_time_of(&self, tick: u64) -> Option<Instant> {
        if self.manual_tick.is_some() {
            return None;
        }
        let ms = tick as f64 * self.scenario.tick_ms() as f64 / self.speed;
        Some(self.origin.instant_at(ms))
    }

    pub fn set_manual_tick(&mut self, tick: u64) {
        self.manual_tick = Some(tick);
    }
}

#[derive(Default)]
pub struct State {
    refcount: u32,
    pub session: Option<Session>,
}

static STATE: Mutex<State> = Mutex::new(State {
    refcount: 0,
    session: None,
});

/// Set once the first load error has been printed, so a broken file is reported once.
static ERROR_PRINTED: AtomicBool = AtomicBool::new(false);

/// Per-device calls answered since load (`gpuwatchFakeCallCount`).
static CALLS: AtomicU64 = AtomicU64::new(0);

/// The simulated CPU cost of one device call (`GPUWATCH_FAKE_CALL_US`, default 0).
fn call_cost() -> Duration {
    static COST: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *COST.get_or_init(|| {
        std::env::var("GPUWATCH_FAKE_CALL_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Duration::ZERO, Duration::from_micros)
    })
}

/// Counts a device call and spends its simulated cost (a spin: CPU, as an ioctl's).
pub fn count_call() {
    CALLS.fetch_add(1, Ordering::Relaxed);
    let cost = call_cost();
    if !cost.is_zero() {
        let start = Instant::now();
        while start.elapsed() < cost {
            std::hint::spin_loop();
        }
    }
}

/// Per-device calls answered since load.
pub fn calls() -> u64 {
    CALLS.load(Ordering::Relaxed)
}

/// Notified when the manual clock moves (`gpuwatchFakeSetTick`), so that event waits sleep
/// until something can have changed instead of polling.
static TICK_MOVED: Condvar = Condvar::new();

/// Wakes every [`wait_for_tick_change`].
pub fn tick_moved() {
    TICK_MOVED.notify_all();
}

/// Sleeps up to `d`, returning early when the manual clock moves.
pub fn wait_for_tick_change(d: Duration) {
    let st = lock();
    let seen = st.session.as_ref().and_then(|s| s.manual_tick);
    let _ = TICK_MOVED.wait_timeout_while(st, d, |st| {
        st.session.as_ref().and_then(|s| s.manual_tick) == seen
    });
}

pub fn lock() -> MutexGuard<'static, State> {
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The scenario and current tick, when initialised.
pub fn snapshot() -> Option<(Arc<Scenario>, u64)> {
    let st = lock();
    st.session
        .as_ref()
        .map(|s| (Arc::clone(&s.scenario), s.tick()))
}

/// The current tick (for a caller already holding the scenario).
pub fn current_tick() -> Option<u64> {
    lock().session.as_ref().map(Session::tick)
}

/// Directory of this shared object, found with `dladdr` on one of our own functions.
fn own_dir() -> Option<PathBuf> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let addr = own_dir as *const c_void;
    // SAFETY: dladdr only reads the address and fills `info`; a 0 return means "not found".
    let found = unsafe { libc::dladdr(addr, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader, valid while we are loaded.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(name.to_string_lossy().into_owned());
    let path = if path.is_relative() {
        std::env::current_dir().ok()?.join(path)
    } else {
        path
    };
    path.parent().map(PathBuf::from)
}

/// Where the scenario comes from: the env variable, else a file next to the library, else
/// `None` (built-in default).
pub fn scenario_location() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(ENV_SCENARIO).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let candidate = own_dir()?.join(SCENARIO_FILE);
    candidate.is_file().then_some(candidate)
}

fn speed_for(scenario: &Scenario) -> f64 {
    std::env::var(ENV_SPEED)
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or_else(|| scenario.speed())
}

/// `nvmlInit*`: count up; the first init loads the scenario (and blocks for its `init_block`,
/// without the lock). `Err` carries the NVML code.
pub fn init() -> Result<(), u32> {
    let mut st = lock();
    if st.refcount > 0 {
        st.refcount += 1;
        return Ok(());
    }
    let path = scenario_location();
    let loaded = match &path {
        Some(p) => Scenario::from_path(p),
        None => Ok(Scenario::builtin_default()),
    };
    let scenario = match loaded {
        Ok(s) => s,
        Err(e) => {
            if !ERROR_PRINTED.swap(true, Ordering::Relaxed) {
                eprintln!("gpuwatch-fake-nvml: cannot load the scenario, nvmlInit fails:\n{e}");
            }
            return Err(gpuwatch_sim::nvml::code::UNKNOWN);
        }
    };
    if let Some(d) = scenario.init_block() {
        // A driver stuck on a GPU: block without holding the lock, as long as asked.
        drop(st);
        if d == Duration::MAX {
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        std::thread::sleep(d);
        st = lock();
        if st.refcount > 0 {
            st.refcount += 1;
            return Ok(());
        }
    }
    if let Some(code) = scenario.init_error() {
        return Err(code);
    }
    let privileged = crate::settings::privileged_at_init(&scenario);
    let settings = vec![crate::settings::Settings::default(); scenario.gpu_count()];
    st.session = Some(Session {
        speed: speed_for(&scenario),
        scenario: Arc::new(scenario),
        path,
        origin: origin_at_init(),
        manual_tick: None,
        event_sets: HashMap::new(),
        next_set_id: 1,
        privileged,
        state_dir: crate::settings::state_dir(),
        settings,
    });
    st.refcount = 1;
    Ok(())
}

/// `nvmlShutdown`: count down; the last one drops the session.
pub fn shutdown() -> Result<(), u32> {
    let mut st = lock();
    if st.refcount == 0 {
        return Err(gpuwatch_sim::nvml::code::UNINITIALIZED);
    }
    st.refcount -= 1;
    if st.refcount == 0 {
        st.session = None;
    }
    Ok(())
}
