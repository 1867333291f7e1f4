//! What NVML's setters change — per-GPU overrides of the scenario's power limit, persistence
//! and compute modes and locked clock ranges — where that state lives, and who may change it.
//!
//! Where the state lives. A real driver keeps these settings in the kernel: what one process
//! sets (`nvidia-smi -pl 500`, `gpuwatch gpu set`) is what every other process reads next, until
//! a reboot or driver reload. The fake has no kernel, so:
//! - by default the settings live in this process's session: a setter's change is seen by
//!   this process's reads only, and the first `nvmlInit` after the last `nvmlShutdown` starts
//!   from the scenario's values again (a driver reload);
//! - with `GPUWATCH_FAKE_STATE_DIR=<dir>` they live in `<dir>/<uuid>.settings`, one small
//!   `key=value` file per GPU that every getter reads and every setter rewrites: the driver's
//!   system-wide state, shared by every process (a `gpuwatch run` and a `gpuwatch gpu set`)
//!   that uses the same directory, as on a real machine. The directory outlives the processes,
//!   as the kernel's state outlives them; delete it to "reboot".
//!
//! Who may change them. The real setters need root (CAP_SYS_ADMIN) and answer NO_PERMISSION
//! otherwise; so do the fake's, decided at init: `GPUWATCH_FAKE_PRIVILEGED` (`1` or `0`) if
//! set, else the scenario's `[scenario] privileged`, else whether the effective uid is 0.
//!
//! Invariants:
//! - A file is replaced atomically (temp file + rename) under an exclusive `flock` on
//!   `<dir>/.lock`: concurrent setters never lose each other's keys, readers never see half a
//!   file. A missing, unreadable or malformed file (or line) reads as "no override": the
//!   scenario's value.
//! - Getters never write; the session's lock is never held during file I/O.

use std::path::{Path, PathBuf};

use gpuwatch_sim::Scenario;
use gpuwatch_sim::nvml::code;

use crate::ffi_types::NvmlReturn;
use crate::state;

pub const ENV_STATE_DIR: &str = "GPUWATCH_FAKE_STATE_DIR";
pub const ENV_PRIVILEGED: &str = "GPUWATCH_FAKE_PRIVILEGED";

/// One GPU's settings changed away from the scenario (`None`: the scenario's value).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settings {
    pub power_limit_mw: Option<u32>,
    pub persistence: Option<bool>,
    /// `nvmlComputeMode_t`: 0 default, 2 prohibited, 3 exclusive process.
    pub compute_mode: Option<u32>,
    /// Locked graphics clocks (min, max) MHz.
    pub gpu_locked: Option<(u32, u32)>,
    /// Locked memory clocks (min, max) MHz.
    pub mem_locked: Option<(u32, u32)>,
}

impl Settings {
    fn parse(text: &str) -> Settings {
        let mut s = Settings::default();
        let pair = |v: &str| {
            let (a, b) = v.split_once(',')?;
            Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
        };
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let value = value.trim();
            match key.trim() {
                "power_limit_mw" => s.power_limit_mw = value.parse().ok(),
                "persistence" => s.persistence = value.parse::<u8>().ok().map(|v| v == 1),
                "compute_mode" => s.compute_mode = value.parse().ok(),
                "gpu_locked" => s.gpu_locked = pair(value),
                "mem_locked" => s.mem_locked = pair(value),
                _ => {}
            }
        }
        s
    }

    fn render(&self) -> String {
        let mut out = String::new();
        if let Some(v) = self.power_limit_mw {
            out.push_str(&format!("power_limit_mw={v}\n"));
        }
        if let Some(v) = self.persistence {
            out.push_str(&format!("persistence={}\n", u8::from(v)));
        }
        if let Some(v) = self.compute_mode {
            out.push_str(&format!("compute_mode={v}\n"));
        }
        if let Some((a, b)) = self.gpu_locked {
            out.push_str(&format!("gpu_locked={a},{b}\n"));
        }
        if let Some((a, b)) = self.mem_locked {
            out.push_str(&format!("mem_locked={a},{b}\n"));
        }
        out
    }
}

/// The state directory from the environment (read at init).
pub fn state_dir() -> Option<PathBuf> {
    std::env::var_os(ENV_STATE_DIR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Whether this session may call the setters (see the module docs for the order).
pub fn privileged_at_init(scenario: &Scenario) -> bool {
    let env = std::env::var(ENV_PRIVILEGED).ok();
    match env.as_deref().map(str::trim) {
        Some("1" | "true" | "yes") => true,
        Some("0" | "false" | "no") => false,
        _ => scenario
            .privileged()
            // SAFETY: geteuid has no preconditions and cannot fail.
            .unwrap_or_else(|| unsafe { libc::geteuid() } == 0),
    }
}

/// Whether the current session may call the setters (false when not initialised).
pub fn privileged() -> bool {
    state::lock().session.as_ref().is_some_and(|s| s.privileged)
}

fn file_of(dir: &Path, uuid: &str) -> PathBuf {
    // UUIDs are `GPU-<hex and dashes>`; anything else is kept out of the path.
    let safe: String = uuid
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    dir.join(format!("{safe}.settings"))
}

/// Where the settings of this session live: a directory, or the session itself.
enum Home {
    Dir(PathBuf),
    Session,
}

fn home() -> Option<Home> {
    let st = state::lock();
    let s = st.session.as_ref()?;
    Some(match &s.state_dir {
        Some(d) => Home::Dir(d.clone()),
        None => Home::Session,
    })
}

/// GPU `index`'s settings (`uuid` names its file in a state directory).
pub fn read(index: usize, uuid: &str) -> Settings {
    match home() {
        Some(Home::Dir(dir)) => std::fs::read_to_string(file_of(&dir, uuid))
            .map(|t| Settings::parse(&t))
            .unwrap_or_default(),
        Some(Home::Session) => state::lock()
            .session
            .as_ref()
            .and_then(|s| s.settings.get(index).copied())
            .unwrap_or_default(),
        None => Settings::default(),
    }
}

/// Changes GPU `index`'s settings with `change`; UNINITIALIZED without a session, UNKNOWN
/// when the state directory cannot be written.
pub fn update(index: usize, uuid: &str, change: impl FnOnce(&mut Settings)) -> NvmlReturn {
    match home() {
        None => code::UNINITIALIZED,
        Some(Home::Session) => {
            let mut st = state::lock();
            match st.session.as_mut().and_then(|s| s.settings.get_mut(index)) {
                Some(s) => {
                    change(s);
                    code::SUCCESS
                }
                None => code::INVALID_ARGUMENT,
            }
        }
        Some(Home::Dir(dir)) => match update_file(&dir, uuid, change) {
            Ok(()) => code::SUCCESS,
            Err(e) => {
                eprintln!(
                    "gpuwatch-fake-nvml: cannot write the GPU settings in {}: {e}",
                    dir.display()
                );
                code::UNKNOWN
            }
        },
    }
}

fn update_file(dir: &Path, uuid: &str, change: impl FnOnce(&mut Settings)) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    std::fs::create_dir_all(dir)?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(".lock"))?;
    // SAFETY: flock on a descriptor we own; it is released when `lock` is closed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let path = file_of(dir, uuid);
    let mut s = std::fs::read_to_string(&path)
        .map(|t| Settings::parse(&t))
        .unwrap_or_default();
    change(&mut s);
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, s.render())?;
    std::fs::rename(&tmp, &path)?;
    drop(lock);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_and_bad_lines_read_as_no_override() {
        let s = Settings {
            power_limit_mw: Some(500_000),
            persistence: Some(false),
            compute_mode: Some(3),
            gpu_locked: Some((1200, 1500)),
            mem_locked: None,
        };
        assert_eq!(Settings::parse(&s.render()), s);
        let odd = Settings::parse("power_limit_mw=lots\ngpu_locked=1200\nnoise\npersistence=1\n");
        assert_eq!(
            odd,
            Settings {
                persistence: Some(true),
                ..Settings::default()
            }
        );
    }

    #[test]
    fn file_names_keep_only_uuid_characters() {
        let p = file_of(Path::new("/s"), "GPU-ab/../x");
        assert_eq!(p, Path::new("/s/GPU-ab____x.settings"));
    }
}
