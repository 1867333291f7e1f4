//! Test harness: a private copy of the built fake library plus a scenario, in a temp dir.
//!
//! The dynamic loader keeps one instance per path and inode, so each test gets its own copy
//! (tests run in parallel). The library is the one cargo built for this profile:
//! `target/<profile>/deps/libgpuwatch_fake_nvml.so` (or the uplifted `target/<profile>/` copy),
//! found from the test binary's own path (`target/<profile>/deps/<test>`).

#![allow(dead_code)]

use std::ffi::{c_char, c_uint};
use std::path::{Path, PathBuf};

use nvml_wrapper::Nvml;
use tempfile::TempDir;

pub const LIB_NAME: &str = "libgpuwatch_fake_nvml.so";

/// The freshly built fake library.
pub fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    // deps/ first: `cargo test` rebuilds it there, while target/<profile>/ may hold an older
    // copy uplifted by an earlier `cargo build`.
    let candidates = [
        Some(deps.join(LIB_NAME)),
        deps.parent().map(|p| p.join(LIB_NAME)),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{LIB_NAME} not found next to {}; build it first: cargo build -p gpuwatch-fake-nvml",
                deps.display()
            )
        })
}

/// A private copy of the library (`libnvidia-ml.so.1`) with `scenario` beside it.
pub struct Fake {
    pub dir: TempDir,
    pub lib_path: PathBuf,
    /// Our own handle on the same instance, for the gpuwatchFake* controls and raw calls.
    pub lib: libloading::Library,
}

impl Fake {
    pub fn new(scenario: Option<&str>) -> Fake {
        assert!(
            std::env::var_os("GPUWATCH_FAKE_SCENARIO").is_none(),
            "unset GPUWATCH_FAKE_SCENARIO to run these tests: it overrides the per-test scenario"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let lib_path = dir.path().join("libnvidia-ml.so.1");
        std::fs::copy(built_library(), &lib_path).expect("copy the fake library");
        if let Some(text) = scenario {
            std::fs::write(dir.path().join("gpuwatch-scenario.toml"), text)
                .expect("write scenario");
        }
        // SAFETY: our own library; its initialisers have no preconditions.
        let lib = unsafe { libloading::Library::new(&lib_path) }.expect("dlopen the copy");
        Fake { dir, lib_path, lib }
    }

    pub fn with(scenario: &str) -> Fake {
        Fake::new(Some(scenario))
    }

    pub fn nvml(&self) -> Nvml {
        Nvml::builder()
            .lib_path(self.lib_path.as_os_str())
            .init()
            .expect("nvml init on the fake")
    }

    pub fn scenario_path(&self) -> PathBuf {
        self.dir.path().join("gpuwatch-scenario.toml")
    }

    pub fn set_tick(&self, tick: u64) {
        // SAFETY: the export has this signature (see crates/fake-nvml/src/control.rs).
        let f = unsafe {
            self.lib
                .get::<unsafe extern "C" fn(u64) -> c_uint>(b"gpuwatchFakeSetTick")
        }
        .expect("gpuwatchFakeSetTick exported");
        assert_eq!(
            unsafe { f(tick) },
            0,
            "SetTick needs an initialised library"
        );
    }

    pub fn tick(&self) -> u64 {
        // SAFETY: as above.
        let f = unsafe {
            self.lib
                .get::<unsafe extern "C" fn() -> u64>(b"gpuwatchFakeGetTick")
        }
        .expect("gpuwatchFakeGetTick exported");
        unsafe { f() }
    }

    /// GPM samples the library holds (allocated, not freed).
    pub fn gpm_samples_live(&self) -> u64 {
        // SAFETY: as above.
        let f = unsafe {
            self.lib
                .get::<unsafe extern "C" fn() -> u64>(b"gpuwatchFakeGpmSamplesLive")
        }
        .expect("gpuwatchFakeGpmSamplesLive exported");
        unsafe { f() }
    }

    pub fn loaded_path(&self) -> (c_uint, String) {
        // SAFETY: as above.
        let f = unsafe {
            self.lib
                .get::<unsafe extern "C" fn(*mut c_char, c_uint) -> c_uint>(
                    b"gpuwatchFakeScenarioPath",
                )
        }
        .expect("gpuwatchFakeScenarioPath exported");
        let mut buf = vec![0u8; 4096];
        let rc = unsafe { f(buf.as_mut_ptr().cast(), buf.len() as c_uint) };
        let end = buf.iter().position(|b| *b == 0).unwrap_or(0);
        (rc, String::from_utf8_lossy(&buf[..end]).into_owned())
    }
}

/// Canonical form for comparing paths that may go through symlinks (e.g. /tmp).
pub fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}
