//! The fixtures of the doctor's tests: host trees built from real shapes (module version
//! files, the library's symlink chain around a copy of the simulated NVML library, device
//! nodes), configs, and running the real binary and reading its JSON.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub const NVRM: &str = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n";
pub const MODULES: &str = "nvidia_uvm 1966080 0 - Live 0x0000000000000000 (POE)\nnvidia_drm 122880 0 - Live 0x0000000000000000 (POE)\nnvidia_modeset 1355776 1 nvidia_drm, Live 0x0000000000000000 (POE)\nnvidia 56500224 3 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)\nvideo 73728 1 nvidia_modeset, Live 0x0000000000000000\n";
pub const LIBDIR: &str = "usr/lib/x86_64-linux-gnu";
pub const TWO_H100: &str = "[scenario]\nname = \"doctor\"\n[[gpu]]\nmodel = \"H100-SXM-80GB\"\n[[gpu]]\nmodel = \"H100-SXM-80GB\"\n";

pub fn fake_library() -> PathBuf {
    gpuwatch::sim::find_fake_library().unwrap_or_else(|e| {
        panic!("{e}: run `cargo build --workspace` (scripts/test.sh does) before `cargo test`")
    })
}

/// A fixture host root.
pub struct Host {
    pub dir: tempfile::TempDir,
}

impl Host {
    pub fn empty() -> Host {
        Host {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// A healthy host: driver 550.90.07 loaded with nvidia_uvm, its nodes, the library chain
    /// serving `scenario`, nvidia-persistenced and the Fabric Manager running (an HGX host:
    /// its H100s register with the NVLink fabric).
    pub fn healthy(scenario: &str) -> Host {
        let h = Host::empty();
        h.write("proc/modules", MODULES);
        h.write("sys/module/nvidia/version", "550.90.07\n");
        h.write("proc/driver/nvidia/version", NVRM);
        h.write("proc/4242/comm", "nvidia-persiste\n");
        h.write("proc/4343/comm", "nv-fabricmanage\n");
        for node in ["nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1"] {
            h.link(&format!("dev/{node}"), "/dev/null");
        }
        h.library("550.90.07", scenario);
        h
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    pub fn link(&self, rel: &str, target: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        let _ = std::fs::remove_file(&p);
        symlink(target, p).expect("symlink");
    }

    /// `libnvidia-ml.so` → `libnvidia-ml.so.1` → `libnvidia-ml.so.<version>` (the fake).
    pub fn library(&self, version: &str, scenario: &str) {
        let file = format!("libnvidia-ml.so.{version}");
        let real = self.path(&format!("{LIBDIR}/{file}"));
        std::fs::create_dir_all(real.parent().expect("parent")).expect("mkdir");
        std::fs::copy(fake_library(), &real).expect("copy the fake library");
        self.write(&format!("{LIBDIR}/gpuwatch-scenario.toml"), scenario);
        self.link(&format!("{LIBDIR}/libnvidia-ml.so.1"), &file);
        self.link(&format!("{LIBDIR}/libnvidia-ml.so"), "libnvidia-ml.so.1");
    }

    /// A config: `top` (top-level keys), the database in the fixture, processes and kubelet
    /// off.
    pub fn config(&self, top: &str) -> PathBuf {
        let db = self.path("var/g.db");
        std::fs::create_dir_all(db.parent().expect("parent")).expect("mkdir");
        let p = self.path("gpuwatch.toml");
        std::fs::write(
            &p,
            format!(
                "{top}\ndatabase = \"{}\"\n[processes]\nenabled = false\n[kubernetes]\nenabled = false\n",
                db.display()
            ),
        )
        .expect("config");
        p
    }

    pub fn doctor(&self, config: &Path, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
            .arg("doctor")
            .arg("--host-root")
            .arg(self.dir.path())
            .arg("--config")
            .arg(config)
            .args(args)
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("GPUWATCH_FAKE_SCENARIO")
            .output()
            .expect("run gpuwatch doctor")
    }
}

pub fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The JSON document; every check has exactly the four keys.
pub fn json(o: &Output) -> Vec<Value> {
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON document");
    let obj = v.as_object().expect("object");
    assert_eq!(obj.keys().collect::<Vec<_>>(), ["checks"]);
    let checks = v["checks"].as_array().expect("checks").clone();
    for c in &checks {
        let mut keys: Vec<&String> = c.as_object().expect("check").keys().collect();
        keys.sort();
        assert_eq!(keys, ["fix", "found", "name", "status"], "{c}");
        assert!(["ok", "warn", "fail"].contains(&c["status"].as_str().expect("status")));
    }
    checks
}

pub fn check<'a>(checks: &'a [Value], name: &str) -> &'a Value {
    checks
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {checks:#?}"))
}

/// Asserts the check's status and that `found` / `fix` contain the needles.
pub fn expect(checks: &[Value], name: &str, status: &str, found: &str, fix: &str) {
    let c = check(checks, name);
    assert_eq!(c["status"], status, "{name}: {c}");
    let (f, x) = (
        c["found"].as_str().unwrap_or(""),
        c["fix"].as_str().unwrap_or(""),
    );
    assert!(f.contains(found), "{name} found {f:?}, wanted {found:?}");
    assert!(x.contains(fix), "{name} fix {x:?}, wanted {fix:?}");
    if status != "ok" {
        assert!(!x.is_empty(), "{name}: a {status} without a fix");
    }
}

/// Whether the tests run as root (CI does): then NVIDIA nodes are made with `mknod` and the
/// doctor runs as `nobody` to meet them.
pub fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The major number of NVIDIA's GPU nodes and `/dev/nvidiactl`'s minor.
const NVIDIA_MAJOR: u32 = 195;
pub const NVIDIACTL_MINOR: u32 = 255;

impl Host {
    /// A real NVIDIA node `rel` (character device 195:`minor`, mode 0660, owner root:root, as
    /// the driver makes them with `NVreg_DeviceFileMode=0660`) when root; otherwise a symlink
    /// to a character device under /dev that this user cannot open read-write.
    pub fn restricted_node(&self, rel: &str, minor: u32) {
        let p = self.path(rel);
        let _ = std::fs::remove_file(&p);
        if !root() {
            let dev = std::fs::read_dir("/dev")
                .expect("list /dev")
                .flatten()
                .map(|e| e.path())
                .find(|d| {
                    use std::os::unix::fs::FileTypeExt;
                    let c = std::ffi::CString::new(d.as_os_str().as_encoded_bytes()).expect("path");
                    // SAFETY: access only reads the NUL-terminated path.
                    let rw = unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK) } == 0;
                    d.metadata().is_ok_and(|m| m.file_type().is_char_device()) && !rw
                })
                .expect("a character device under /dev this user cannot open read-write");
            symlink(dev, &p).expect("symlink");
            return;
        }
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("path");
        let dev = libc::makedev(NVIDIA_MAJOR, minor);
        // SAFETY: mknod only reads the NUL-terminated path.
        let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o660, dev) };
        assert_eq!(
            rc,
            0,
            "mknod {}: {}",
            p.display(),
            std::io::Error::last_os_error()
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o660)).expect("chmod");
    }

    /// `gpuwatch doctor --format json` as an unprivileged user: as root, a copy of the binary
    /// run as `nobody` by util-linux's `setpriv` (the fixture opened to other users); else as
    /// this user.
    pub fn doctor_unprivileged(&self, config: &Path) -> Output {
        let mut cmd = if root() {
            let mode = |p: &Path, m: u32| {
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod")
            };
            mode(self.dir.path(), 0o755);
            mode(config, 0o644);
            // A hard link, not a copy: a file just written may still be open for writing in
            // a child another test thread forked, and exec'ing it then fails (ETXTBSY).
            let bin = self.path("gpuwatch");
            if std::fs::hard_link(env!("CARGO_BIN_EXE_gpuwatch"), &bin).is_err() {
                std::fs::copy(env!("CARGO_BIN_EXE_gpuwatch"), &bin).expect("copy the binary");
            }
            mode(&bin, 0o755);
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(bin);
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        };
        cmd.args(["doctor", "--format", "json", "--host-root"])
            .arg(self.dir.path())
            .arg("--config")
            .arg(config)
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("GPUWATCH_FAKE_SCENARIO");
        // A copied binary (no hard link across filesystems) can still meet ETXTBSY: try again.
        for _ in 0..20 {
            let o = cmd
                .output()
                .expect("run gpuwatch doctor (setpriv is util-linux's)");
            if !String::from_utf8_lossy(&o.stderr).contains("Text file busy") {
                return o;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("gpuwatch doctor: Text file busy, 20 times")
    }

    /// `etc/ld.so.cache` as the host's `ldconfig` writes it for the tree: `dirs` in
    /// `etc/ld.so.conf.d/nvidia.conf` (included by `etc/ld.so.conf`), then the trusted
    /// directories, by `ldconfig -r ROOT -X` (chroot: as root, else in a user namespace where
    /// this user is root); no links are made.
    pub fn ld_cache(&self, dirs: &[&str]) {
        self.write("etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
        self.write(
            "etc/ld.so.conf.d/nvidia.conf",
            &dirs.iter().map(|d| format!("{d}\n")).collect::<String>(),
        );
        let ldconfig = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
            .unwrap_or("ldconfig");
        let mut cmd = if root() {
            Command::new(ldconfig)
        } else {
            let mut c = Command::new("unshare");
            c.args(["--map-root-user", ldconfig]);
            c
        };
        let o = cmd
            .arg("-r")
            .arg(self.dir.path())
            .arg("-X")
            .output()
            .expect("run ldconfig");
        assert!(
            o.status.success() && self.path("etc/ld.so.cache").is_file(),
            "ldconfig: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
