//! A real `gpuwatch run` on simulated GPUs following a kernel log (`[xid] kmsg_path` = a
//! FIFO fed with `/dev/kmsg` records): the XIDs land in `gpu_events` with their GPU found by
//! PCI address (or kept by address), the XID NVML also reported is one row, and
//! `gpu_xid_error` fires with the catalogue's meaning; a restart stores only the history
//! that is newer than the XIDs already stored; an unreadable log is said once.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

const GPU0: &str = "GPU-19191919-0000-4000-8000-000000000000";
const GPU1: &str = "GPU-9b9b9b9b-0000-4000-8000-000000000001";

const SCENARIO: &str = r#"
[scenario]
name = "kmsg"
duration = "1h"
[[gpu]]
model = "H100-SXM-80GB"
uuid = "GPU-19191919-0000-4000-8000-000000000000"
pci_bus_id = "00000000:19:00.0"
[[gpu.timeline]]
util_gpu = 50
[[gpu]]
model = "H100-SXM-80GB"
uuid = "GPU-9b9b9b9b-0000-4000-8000-000000000001"
pci_bus_id = "00000000:9B:00.0"
[[gpu.timeline]]
util_gpu = 50
[[event]]
gpu = 0
at = "3s"
xid = 48
"#;

struct Rig {
    dir: tempfile::TempDir,
    _sim: gpuwatch::sim::SimGpus,
    lib: PathBuf,
}

impl Rig {
    fn new() -> Rig {
        let lib = gpuwatch::sim::find_fake_library().expect("cargo build --workspace first");
        let sim = gpuwatch::sim::SimGpus::prepare(&lib, SCENARIO, "s.toml").expect("scenario");
        Rig {
            lib: sim.library_path(),
            _sim: sim,
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts `gpuwatch run` following `kmsg`; its log goes to `log`.
    fn run(&self, kmsg: &Path, log: &str) -> Daemon {
        let cfg = self.path("g.toml");
        std::fs::write(
            &cfg,
            format!(
                "host = \"node\"\ndatabase = \"{}\"\nnvml_library = \"{}\"\ninterval = \"500ms\"\n\
                 [http]\nenabled = false\n[xid]\nkmsg_path = \"{}\"\n",
                self.path("g.db").display(),
                self.lib.display(),
                kmsg.display()
            ),
        )
        .expect("config");
        let child = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
            .env_remove("RUST_LOG")
            .args(["run", "--config"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.path(log)).expect("log"))
            .spawn()
            .expect("spawn");
        Daemon(child)
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    fn query<T: rusqlite::types::FromSql>(&self, sql: &str) -> Option<T> {
        let c = Connection::open_with_flags(self.path("g.db"), OpenFlags::SQLITE_OPEN_READ_ONLY)
            .ok()?;
        c.query_row(sql, [], |r| r.get(0)).ok()
    }

    fn wait_for<T: rusqlite::types::FromSql>(&self, what: &str, sql: &str) -> T {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(v) = self.query(sql) {
                return v;
            }
            assert!(
                Instant::now() < until,
                "timed out waiting for {what}: {sql}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

struct Daemon(Child);

impl Daemon {
    fn stop(mut self) {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(30);
        while self.0.try_wait().ok().flatten().is_none() {
            assert!(Instant::now() < until, "gpuwatch did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Microseconds since boot now, the clock of `/dev/kmsg` timestamps.
fn boot_us() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) },
        0
    );
    ts.tv_sec * 1_000_000 + ts.tv_nsec / 1000
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn record(seq: u32, us: i64, text: &str) -> String {
    format!("4,{seq},{us},-;{text}\n")
}

const DBE: &str = "NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x12bac1c3e0 partition 2, subpartition 1.";
const OFF_BUS: &str =
    "NVRM: Xid (PCI:0000:9b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.";
const GSP: &str = "NVRM: Xid (PCI:0000:3b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU4 GSP!";

#[test]
fn the_daemon_stores_kernel_log_xids_once_and_alerts_on_them() {
    let rig = Rig::new();
    let fifo = rig.path("kmsg");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let daemon = rig.run(&fifo, "run1.log");
    // NVML reports the XID 48 first (the scenario's event)...
    rig.wait_for::<i64>(
        "NVML's XID 48",
        "SELECT event_id FROM gpu_events WHERE code = 48 AND source = 'nvml'",
    );
    // ...then the kernel log says the same, and two XIDs NVML did not report.
    let (us, wall) = (boot_us(), now_ms());
    let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let text = [
        record(1, us - 200_000, "nvidia-nvswitch0: open (major=511)"),
        record(2, us - 100_000, DBE),
        " SUBSYSTEM=pci\n".to_string(),
        record(3, us, OFF_BUS),
        record(4, us, GSP),
    ]
    .concat();
    w.write_all(text.as_bytes()).unwrap();
    drop(w);
    rig.wait_for::<i64>(
        "the XID 119",
        "SELECT event_id FROM gpu_events WHERE code = 119",
    );
    let summary: String = rig.wait_for(
        "gpu_xid_error on GPU 1",
        &format!(
            "SELECT summary FROM alerts WHERE rule = 'gpu_xid_error' AND gpu_uuid = '{GPU1}'
               AND state = 'firing'"
        ),
    );
    assert!(
        summary.contains("XID 79 (GPU has fallen off the bus; action: drain the node)"),
        "{summary}"
    );
    daemon.stop();

    let rows = |sql: &str| -> Vec<(i64, Option<String>, String, String, i64)> {
        let c = Connection::open(rig.path("g.db")).unwrap();
        let mut s = c.prepare(sql).unwrap();
        s.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
    };
    let xids = "SELECT code, gpu_uuid, coalesce(pci_bus_id, '-'), source, count(*) FROM gpu_events
                WHERE kind = 'xid' GROUP BY 1, 2, 3, 4 ORDER BY 1";
    let got = rows(xids);
    assert_eq!(
        got,
        [
            (
                48,
                Some(GPU0.into()),
                "0000:19:00".into(),
                "nvml+kmsg".into(),
                1
            ),
            (79, Some(GPU1.into()), "0000:9b:00".into(), "kmsg".into(), 1),
            (119, None, "0000:3b:00".into(), "kmsg".into(), 1),
        ]
    );
    let kernel: i64 = rig
        .query("SELECT kernel_ms FROM gpu_events WHERE code = 79")
        .unwrap();
    assert!(
        (kernel - wall).abs() < 5_000,
        "kernel time {kernel} vs wall {wall}"
    );

    // A restart reads the same records as history (plus one logged while it was down):
    // only the newer one is stored.
    std::thread::sleep(Duration::from_millis(1500));
    let down = boot_us();
    let history = rig.path("kmsg.txt");
    let mut text = text;
    text.push_str(&record(
        5,
        down,
        "NVRM: Xid (PCI:0000:19:00): 94, pid=1248209, name=python3.10, Ch 00000008",
    ));
    std::fs::write(&history, text).unwrap();
    let daemon = rig.run(&history, "run2.log");
    rig.wait_for::<i64>(
        "the XID 94",
        "SELECT event_id FROM gpu_events WHERE code = 94",
    );
    daemon.stop();
    let mut want = got;
    want.insert(
        2,
        (94, Some(GPU0.into()), "0000:19:00".into(), "kmsg".into(), 1),
    );
    assert_eq!(rows(xids), want, "{}", rig.log("run2.log"));
    let log = rig.log("run2.log");
    assert!(
        log.contains("skipped=3"),
        "three records were already stored: {log}"
    );

    // A log that cannot be read is said once; NVML's events go on alone.
    let daemon = rig.run(&rig.path("missing/kmsg"), "run3.log");
    let until = Instant::now() + Duration::from_secs(30);
    while !rig.log("run3.log").contains("sampling") {
        assert!(Instant::now() < until, "{}", rig.log("run3.log"));
        std::thread::sleep(Duration::from_millis(100));
    }
    daemon.stop();
    let log = rig.log("run3.log");
    assert_eq!(
        log.matches("the kernel log cannot be read: XIDs come from NVML events alone")
            .count(),
        1,
        "{log}"
    );
}
