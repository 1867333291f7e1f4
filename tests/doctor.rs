//! `gpuwatch doctor` against fixture host trees (module version files with real content,
//! library symlink chains, device nodes — symlinks to `/dev/null`, a real character device,
//! since making NVIDIA nodes needs root — and missing or wrong ones) and the simulated NVML
//! library with injected errors. Every test runs the real binary and checks the text, the
//! JSON document and the exit code.
//!
//! The fake library (`cargo build --workspace`; scripts/test.sh does it) is copied into each
//! fixture as `libnvidia-ml.so.<version>`, next to its scenario.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const NVRM: &str = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n";
const MODULES: &str = "nvidia_uvm 1966080 0 - Live 0x0000000000000000 (POE)\nnvidia_drm 122880 0 - Live 0x0000000000000000 (POE)\nnvidia_modeset 1355776 1 nvidia_drm, Live 0x0000000000000000 (POE)\nnvidia 56500224 3 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)\nvideo 73728 1 nvidia_modeset, Live 0x0000000000000000\n";
const LIBDIR: &str = "usr/lib/x86_64-linux-gnu";
const TWO_H100: &str = "[scenario]\nname = \"doctor\"\n[[gpu]]\nmodel = \"H100-SXM-80GB\"\n[[gpu]]\nmodel = \"H100-SXM-80GB\"\n";

fn fake_library() -> PathBuf {
    gpuwatch::sim::find_fake_library().unwrap_or_else(|e| {
        panic!("{e}: run `cargo build --workspace` (scripts/test.sh does) before `cargo test`")
    })
}

/// A fixture host root.
struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    fn empty() -> Host {
        Host {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// A healthy host: driver 550.90.07 loaded with nvidia_uvm, its nodes, the library chain
    /// serving `scenario`, nvidia-persistenced running.
    fn healthy(scenario: &str) -> Host {
        let h = Host::empty();
        h.write("proc/modules", MODULES);
        h.write("sys/module/nvidia/version", "550.90.07\n");
        h.write("proc/driver/nvidia/version", NVRM);
        h.write("proc/4242/comm", "nvidia-persiste\n");
        for node in ["nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1"] {
            h.link(&format!("dev/{node}"), "/dev/null");
        }
        h.library("550.90.07", scenario);
        h
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    fn link(&self, rel: &str, target: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        let _ = std::fs::remove_file(&p);
        symlink(target, p).expect("symlink");
    }

    /// `libnvidia-ml.so` → `libnvidia-ml.so.1` → `libnvidia-ml.so.<version>` (the fake).
    fn library(&self, version: &str, scenario: &str) {
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
    fn config(&self, top: &str) -> PathBuf {
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

    fn doctor(&self, config: &Path, args: &[&str]) -> Output {
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

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The JSON document; every check has exactly the four keys.
fn json(o: &Output) -> Vec<Value> {
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

fn check<'a>(checks: &'a [Value], name: &str) -> &'a Value {
    checks
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {checks:#?}"))
}

/// Asserts the check's status and that `found` / `fix` contain the needles.
fn expect(checks: &[Value], name: &str, status: &str, found: &str, fix: &str) {
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

#[test]
fn a_healthy_host_is_all_ok_in_order_and_exits_0() {
    let h = Host::healthy(TWO_H100);
    let db = h.path("var/g.db");
    std::fs::create_dir_all(db.parent().expect("parent")).expect("mkdir");
    drop(gpuwatch::store::open(&db, &gpuwatch::store::StoreConfig::new("h")).expect("db"));
    let cfg = h.config("");
    let o = h.doctor(&cfg, &[]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[0].starts_with("ok    kernel module: nvidia 550.90.07 loaded (NVRM version: NVIDIA UNIX x86_64 Kernel Module 550.90.07"), "{t}");
    let names: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.get(6..).and_then(|r| r.split(':').next()))
        .collect();
    let order = [
        "kernel module",
        "nvidia_uvm",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidiaN",
        "nvml library",
        "nvml library links",
        "nvml library versions",
        "driver versions",
        "nvml init",
        "gpu0",
        "gpu0 persistence mode",
        "gpu1",
        "gpu1 PCIe link",
        "config",
        "database",
        "receivers",
    ];
    let mut at = 0;
    for n in order {
        at += names[at..]
            .iter()
            .position(|x| *x == n)
            .unwrap_or_else(|| panic!("{n} out of order in {t}"));
    }
    assert!(t.ends_with("0 warnings, 0 failures\n"), "{t}");
    assert!(
        t.contains("ok    gpu0 persistence mode: on; nvidia-persistenced runs (pid 4242)"),
        "{t}"
    );

    let o = h.doctor(&cfg, &["--format", "json"]);
    assert_eq!(o.status.code(), Some(0));
    let checks = json(&o);
    assert!(
        checks.iter().all(|c| c["status"] == "ok" && c["fix"] == ""),
        "{checks:#?}"
    );
    expect(
        &checks,
        "nvml library",
        "ok",
        &format!("{LIBDIR}/libnvidia-ml.so.1 → libnvidia-ml.so.550.90.07 (standard dirs)"),
        "",
    );
    expect(
        &checks,
        "driver versions",
        "ok",
        "kernel module 550.90.07, library file 550.90.07, NVML reports 550.90.07",
        "",
    );
    expect(&checks, "nvml init", "ok", "(driver 550.90.07)", "");
    expect(&checks, "nvml init", "ok", ": 2 GPUs", "");
    expect(
        &checks,
        "/dev/nvidiaN",
        "ok",
        "2 GPU nodes (nvidia0, nvidia1)",
        "",
    );
    expect(
        &checks,
        "gpu1 memory repair",
        "ok",
        "0 correctable, 0 uncorrectable rows remapped",
        "",
    );
    expect(&checks, "database", "ok", "quick_check ok", "");
}

#[test]
fn a_missing_module_and_missing_or_wrong_nodes_fail_with_the_fix() {
    let h = Host::healthy(TWO_H100);
    h.write("proc/modules", "video 73728 0 - Live 0x0000000000000000\n");
    std::fs::remove_file(h.path("dev/nvidiactl")).expect("rm");
    std::fs::remove_file(h.path("dev/nvidia-uvm")).expect("rm");
    std::fs::remove_file(h.path("dev/nvidia1")).expect("rm");
    h.write("dev/nvidia1", "");
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2));
    let c = json(&o);
    expect(
        &c,
        "kernel module",
        "fail",
        "nvidia is not in",
        "modprobe nvidia",
    );
    expect(
        &c,
        "nvidia_uvm",
        "warn",
        "not loaded",
        "modprobe nvidia-uvm",
    );
    expect(
        &c,
        "/dev/nvidiactl",
        "fail",
        "does not exist",
        "nvidia-modprobe",
    );
    expect(
        &c,
        "/dev/nvidia-uvm",
        "warn",
        "does not exist",
        "nvidia-modprobe -u",
    );
    expect(
        &c,
        "/dev/nvidiaN",
        "fail",
        "nvidia1 is a regular file, not a character device",
        "removed first",
    );

    // No GPU nodes at all, and no version files: the versions cannot be compared.
    let h = Host::healthy(TWO_H100);
    for n in ["nvidia0", "nvidia1"] {
        std::fs::remove_file(h.path(&format!("dev/{n}"))).expect("rm");
    }
    std::fs::remove_file(h.path("sys/module/nvidia/version")).expect("rm");
    std::fs::remove_file(h.path("proc/driver/nvidia/version")).expect("rm");
    let o = h.doctor(&h.config(""), &[]);
    assert_eq!(o.status.code(), Some(2));
    let t = text(&o);
    assert!(
        t.contains("FAIL  /dev/nvidiaN: no /dev/nvidia0, /dev/nvidia1, ... in"),
        "{t}"
    );
    assert!(
        t.contains("warn  kernel module: nvidia loaded, but neither"),
        "{t}"
    );
    assert!(
        t.contains("warn  driver versions: kernel module unknown"),
        "{t}"
    );
}

#[test]
fn no_library_a_broken_chain_and_a_missing_configured_file_fail() {
    let h = Host::healthy(TWO_H100);
    std::fs::remove_dir_all(h.path("usr")).expect("rm");
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2));
    let c = json(&o);
    expect(
        &c,
        "nvml library",
        "fail",
        "no libnvidia-ml.so.1 in the standard directories",
        "install the NVIDIA driver",
    );

    // The link points at a version that is not there (a half-removed driver).
    let h = Host::healthy(TWO_H100);
    h.link(
        &format!("{LIBDIR}/libnvidia-ml.so.1"),
        "libnvidia-ml.so.535.104.05",
    );
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2));
    let c = json(&o);
    expect(
        &c,
        "nvml library",
        "fail",
        "libnvidia-ml.so.1 → libnvidia-ml.so.535.104.05: broken link",
        "ldconfig",
    );

    let o = h.doctor(
        &h.config("nvml_library = \"/nonexistent/libnvidia-ml.so.1\""),
        &["--format", "json"],
    );
    assert_eq!(o.status.code(), Some(2));
    let c = json(&o);
    expect(
        &c,
        "nvml library",
        "fail",
        "the configured nvml_library /nonexistent/libnvidia-ml.so.1 cannot be opened",
        "nvml_library",
    );
    expect(
        &c,
        "nvml init",
        "fail",
        "cannot load /nonexistent/libnvidia-ml.so.1",
        "install the NVIDIA driver",
    );
}

#[test]
fn ld_library_path_wins_and_stale_versions_and_broken_dev_links_warn() {
    let h = Host::healthy(TWO_H100);
    // An older copy first in LD_LIBRARY_PATH (a container image that ships its own).
    let old = h.path("opt/cuda/lib64/libnvidia-ml.so.535.104.05");
    std::fs::create_dir_all(old.parent().expect("parent")).expect("mkdir");
    std::fs::copy(fake_library(), &old).expect("copy");
    h.write("opt/cuda/lib64/gpuwatch-scenario.toml", TWO_H100);
    h.link(
        "opt/cuda/lib64/libnvidia-ml.so.1",
        "libnvidia-ml.so.535.104.05",
    );
    h.link(&format!("{LIBDIR}/libnvidia-ml.so"), "libnvidia-ml.so.2");
    let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args(["doctor", "--format", "json", "--host-root"])
        .arg(h.dir.path())
        .arg("--config")
        .arg(h.config(""))
        .env("LD_LIBRARY_PATH", "/opt/cuda/lib64")
        .output()
        .expect("doctor");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "nvml library",
        "ok",
        "opt/cuda/lib64/libnvidia-ml.so.1 → libnvidia-ml.so.535.104.05 (LD_LIBRARY_PATH)",
        "",
    );
    expect(
        &c,
        "nvml library versions",
        "warn",
        "several versions: 535.104.05",
        "remove the stale copies",
    );
    expect(
        &c,
        "nvml library links",
        "warn",
        "libnvidia-ml.so → libnvidia-ml.so.2",
        "ldconfig",
    );
    // The container mismatch: the picked library's version against the module's.
    expect(
        &c,
        "driver versions",
        "fail",
        "kernel module 550.90.07, library file 535.104.05",
        "host driver's libnvidia-ml",
    );
}

#[test]
fn nvml_init_errors_fail_with_the_tables_cause_and_fix() {
    let cases = [
        (
            "LIB_RM_VERSION_MISMATCH",
            "different versions",
            "reboot or reload",
        ),
        (
            "DRIVER_NOT_LOADED",
            "kernel driver is not loaded",
            "modprobe nvidia",
        ),
        (
            "NO_PERMISSION",
            "no permission to open the NVIDIA devices",
            "video",
        ),
    ];
    for (code, cause, fix) in cases {
        let h = Host::healthy(&format!(
            "[scenario]\nname = \"x\"\ninit_error = \"{code}\"\n[[gpu]]\nmodel = \"T4\"\n"
        ));
        let o = h.doctor(&h.config(""), &["--format", "json"]);
        assert_eq!(o.status.code(), Some(2), "{code}");
        let c = json(&o);
        expect(&c, "nvml init", "fail", &format!("nvmlInit: {code}: "), fix);
        expect(&c, "nvml init", "fail", cause, "");
        if code == "LIB_RM_VERSION_MISMATCH" {
            expect(
                &c,
                "driver versions",
                "fail",
                "nvmlInit answered LIB_RM_VERSION_MISMATCH",
                "container",
            );
        }
        assert!(
            !c.iter().any(|c| c["name"] == "gpu0"),
            "{code}: no GPU read after a failed init"
        );
        // `run` words the same failure from the same table: the doctor's fix, verbatim.
        let lib = h.path(&format!("{LIBDIR}/libnvidia-ml.so.1"));
        let run = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
            .args(["run", "--nvml-library"])
            .arg(&lib)
            .arg("--db")
            .arg(h.path("var/run.db"))
            .output()
            .expect("run");
        assert_eq!(run.status.code(), Some(3), "{code}");
        let stderr = String::from_utf8_lossy(&run.stderr);
        let doctor_fix = check(&c, "nvml init")["fix"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(
            stderr.contains(&doctor_fix) && stderr.contains(cause),
            "{code}: run said {stderr:?}, the doctor's fix is {doctor_fix:?}"
        );
    }
}

#[test]
fn lost_reset_power_and_timeout_errors_fail_per_gpu_and_the_rest_is_read() {
    let cases = [
        ("*", "GPU_IS_LOST", "gpu1", "fallen off the bus", "Xid 79"),
        (
            "nvmlDeviceGetPersistenceMode",
            "RESET_REQUIRED",
            "gpu1 persistence mode",
            "needs a reset",
            "nvidia-smi -r",
        ),
        (
            "nvmlDeviceGetName",
            "INSUFFICIENT_POWER",
            "gpu1",
            "power cables",
            "power supply",
        ),
        (
            "nvmlDeviceGetComputeMode",
            "TIMEOUT",
            "gpu1 compute mode",
            "timed out",
            "Xid",
        ),
    ];
    for (symbol, code, name, cause, fix) in cases {
        let h = Host::healthy(&format!(
            "{TWO_H100}[[fault]]\ngpu = 1\nsymbol = \"{symbol}\"\nerror = \"{code}\"\n"
        ));
        let o = h.doctor(&h.config(""), &["--format", "json"]);
        assert_eq!(o.status.code(), Some(2), "{code}: {}", text(&o));
        let c = json(&o);
        expect(&c, name, "fail", &format!("{code}: "), fix);
        expect(&c, name, "fail", cause, "");
        expect(&c, "gpu0 compute mode", "ok", "Default", "");
    }
    // A permission error on one read is "cannot tell", not a failure.
    let h = Host::healthy(&format!(
        "{TWO_H100}[[fault]]\ngpu = 0\nsymbol = \"nvmlDeviceGetEccMode\"\nerror = \"NO_PERMISSION\"\n"
    ));
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(1));
    expect(
        &json(&o),
        "gpu0 ECC",
        "warn",
        "cannot read: NO_PERMISSION",
        "video",
    );
}

#[test]
fn a_gpu_whose_calls_hang_is_reported_hung_within_the_timeout() {
    let h = Host::healthy(&format!(
        "{TWO_H100}[[fault]]\ngpu = 0\nsymbol = \"nvmlDeviceGetPersistenceMode\"\nblock = \"forever\"\n"
    ));
    let started = std::time::Instant::now();
    let o = h.doctor(&h.config(""), &["--format", "json", "--nvml-timeout", "1s"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(o.status.code(), Some(2));
    let c = json(&o);
    expect(
        &c,
        "gpu0",
        "fail",
        "did not return within 1s",
        "reset the GPU",
    );
    expect(
        &c,
        "gpu1",
        "warn",
        "stopped at the hung gpu0",
        "fix gpu0 first",
    );
    // The setup checks still ran.
    expect(&c, "config", "ok", "valid", "");
}

#[test]
fn degraded_link_persistence_off_and_pending_remap_warn_and_exit_1() {
    let h = Host::healthy(
        "[scenario]\nname = \"d\"\n[[gpu]]\nmodel = \"H100-SXM-80GB\"\npersistence_mode = false\n[[gpu.timeline]]\npcie_gen = 3\npcie_width = 8\nremap_pending = true\nremapped_rows_unc = 1\n",
    );
    std::fs::remove_file(h.path("proc/4242/comm")).expect("rm");
    std::fs::remove_file(h.path("dev/nvidia1")).expect("rm");
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "gpu0 PCIe link",
        "warn",
        "Gen3 x8 (maximum Gen5 x16)",
        "reseat",
    );
    expect(
        &c,
        "gpu0 persistence mode",
        "warn",
        "off; nvidia-persistenced does not run",
        "nvidia-persistenced",
    );
    expect(
        &c,
        "gpu0 memory repair",
        "warn",
        "a row remap is pending (0 correctable, 1 uncorrectable",
        "nvidia-smi -r -i 0",
    );
    expect(&c, "gpu0 MIG mode", "ok", "disabled", "");
}

#[test]
fn setup_failures_config_database_attribution_kubelet_prometheus_receivers() {
    let h = Host::healthy(TWO_H100);
    // A broken config: the rest runs on the defaults.
    let bad = h.path("bad.toml");
    std::fs::write(&bad, "intervall = \"1s\"\n").expect("write");
    let o = h.doctor(&bad, &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2));
    expect(
        &json(&o),
        "config",
        "fail",
        "unknown field",
        "gpuwatch run --check",
    );

    // Not a database; a closed port for Prometheus and a webhook; a Slack URL env var that is
    // not set; kubelet required but absent; proc_root without processes.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let cfg = h.path("setup.toml");
    let proc_root = h.path("empty-proc");
    std::fs::create_dir_all(&proc_root).expect("mkdir");
    std::fs::write(
        h.path("junk.db"),
        "not sqlite at all, just text ".repeat(200),
    )
    .expect("junk");
    std::fs::write(
        &cfg,
        format!(
            "database = \"{}\"\n[processes]\nproc_root = \"{}\"\n[kubernetes]\nenabled = true\npod_resources_socket = \"{}\"\n\
             [prometheus]\nurl = \"http://127.0.0.1:{closed}\"\n\
             [[notify.webhook]]\nname = \"hook\"\nurl = \"http://127.0.0.1:{closed}/secret-path\"\n\
             [[notify.slack]]\nname = \"oncall\"\nwebhook_url_env = \"GPUWATCH_DOCTOR_TEST_UNSET\"\n",
            h.path("junk.db").display(),
            proc_root.display(),
            h.path("kubelet.sock").display()
        ),
    )
    .expect("config");
    let o = h.doctor(&cfg, &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2));
    let c = json(&o);
    expect(&c, "config", "ok", "valid", "");
    expect(
        &c,
        "database",
        "fail",
        "junk.db: the file is damaged: file is not a database",
        "move the file aside",
    );
    expect(
        &c,
        "process attribution",
        "fail",
        "has no processes",
        "proc_root",
    );
    expect(
        &c,
        "kubelet",
        "fail",
        "kubelet.sock does not exist",
        "pod-resources",
    );
    expect(
        &c,
        "prometheus",
        "fail",
        &format!("cannot connect to 127.0.0.1:{closed}"),
        "[prometheus] url",
    );
    expect(
        &c,
        "receiver hook",
        "fail",
        &format!("cannot connect to 127.0.0.1:{closed}"),
        "gpuwatch notify test",
    );
    expect(
        &c,
        "receiver oncall",
        "fail",
        "GPUWATCH_DOCTOR_TEST_UNSET is not set",
        "webhook_url_env",
    );
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("secret-path"),
        "a URL's path is never printed"
    );

    // The same receivers reachable, with a secret URL: only host:port is printed; a missing
    // database directory fails; a listening kubelet socket is ok.
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let open = l.local_addr().expect("addr").port();
    let sock = h.path("kubelet-ok.sock");
    let _k = std::os::unix::net::UnixListener::bind(&sock).expect("unix socket");
    std::fs::write(
        &cfg,
        format!(
            "database = \"{}/no/such/dir/g.db\"\n[processes]\nenabled = false\n[kubernetes]\nenabled = true\npod_resources_socket = \"{}\"\n\
             [prometheus]\nurl = \"http://127.0.0.1:{open}\"\n\
             [[notify.slack]]\nname = \"oncall\"\nwebhook_url_env = \"GPUWATCH_DOCTOR_TEST_SLACK\"\n",
            h.dir.path().display(),
            sock.display()
        ),
    )
    .expect("config");
    let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args(["doctor", "--format", "json", "--host-root"])
        .arg(h.dir.path())
        .arg("--config")
        .arg(&cfg)
        .env_remove("LD_LIBRARY_PATH")
        .env(
            "GPUWATCH_DOCTOR_TEST_SLACK",
            format!("http://127.0.0.1:{open}/services/T0/B0/s3cr3tT0ken"),
        )
        .output()
        .expect("doctor");
    assert_eq!(o.status.code(), Some(2));
    let c = json(&o);
    expect(
        &c,
        "database",
        "fail",
        "no/such/dir does not exist",
        "mkdir -p",
    );
    expect(&c, "kubelet", "ok", "accepts connections", "");
    expect(
        &c,
        "prometheus",
        "ok",
        &format!("127.0.0.1:{open} accepts TCP connections (nothing sent)"),
        "",
    );
    expect(
        &c,
        "receiver oncall",
        "ok",
        &format!("slack: 127.0.0.1:{open} accepts"),
        "",
    );
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("s3cr3t"),
        "the secret is never printed"
    );
}

#[test]
fn a_damaged_database_fails_with_the_move_aside_fix() {
    let h = Host::healthy(TWO_H100);
    let db = h.path("var/g.db");
    std::fs::create_dir_all(db.parent().expect("parent")).expect("mkdir");
    drop(gpuwatch::store::open(&db, &gpuwatch::store::StoreConfig::new("h")).expect("db"));
    // Overwrite the root page of the newest table (a table's, not the schema's): what a torn
    // disk write or a bad copy leaves.
    let root: i64 = rusqlite::Connection::open(&db)
        .expect("open")
        .query_row(
            "SELECT max(rootpage) FROM sqlite_schema WHERE type = 'table'",
            [],
            |r| r.get(0),
        )
        .expect("root page");
    let mut bytes = std::fs::read(&db).expect("read db");
    let page = match u16::from_be_bytes([bytes[16], bytes[17]]) {
        1 => 65_536,
        n => usize::from(n),
    };
    assert!(bytes.len() > 2 * page, "the schema spans several pages");
    let start = (usize::try_from(root).expect("page number") - 1) * page;
    assert!(start > 0, "not the schema's page");
    for b in &mut bytes[start..start + page] {
        *b = 0xA5;
    }
    std::fs::write(&db, &bytes).expect("write db");
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "database",
        "fail",
        "the file is damaged: database disk image is malformed",
        "move the file aside",
    );
}
