//! The kernel-log XID follower: a thread that reads `/dev/kmsg` (or `[xid] kmsg_path`) and
//! sends every `NVRM: Xid` record as an [`Event`] on the channel NVML's event thread uses,
//! so kernel-log XIDs reach the store exactly like NVML's (the store makes the same XID from
//! both one row: `store/events.rs`).
//!
//! Invariants:
//! - Sampling never waits for it: the thread blocks in `read` (one record per read from
//!   `/dev/kmsg`), never polls, and is not joined (a stopping daemon does not wait for it).
//! - Events carry `ts_ms` 0 (the sampler stamps them with the tick that picks them up, so
//!   rules see them in time order), the kernel's own time in `kernel_ms` (boot time +
//!   the record's µs since boot) and the GPU's PCI address; the GPU's UUID only when an
//!   `NVRM: GPU at PCI:… GPU-…` record named it.
//! - History (records already in the kernel's buffer at open) is sent only when newer than
//!   the newest XID already stored, plus [`HISTORY_SLACK_MS`]: a restart does not store
//!   the same XIDs again, and XIDs logged while gpuwatch was down are not lost.
//! - Overwritten records (`EPIPE`: the reader fell behind the ring buffer) are reported and
//!   reading goes on; a record larger than the buffer (`EINVAL`) grows it. Any other read
//!   error ends the follower with one warning: XIDs then come from NVML alone.
//! - When the log cannot be opened, that is said once at start and NVML's events stay the
//!   only source. A FIFO is reopened when its writer closes it (the open blocks); a regular
//!   file is read to its end once.

pub mod record;

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;

use crate::model::{Event, EventSource, TsMs};
use crate::xid::nvrm::{self, Nvrm, PciAddr};

use self::record::BootClock;

/// A stored XID's kernel time, converted again after a restart (the boot time is read
/// again), can come out this much later; history up to the newest stored XID plus this is
/// skipped.
pub const HISTORY_SLACK_MS: i64 = 1_000;
/// The first read buffer; `/dev/kmsg` records are at most about 8 KiB with their
/// continuation lines.
const READ_BUF: usize = 16 * 1024;
/// The largest buffer an `EINVAL` (record larger than the buffer) may grow it to.
const MAX_READ_BUF: usize = 1024 * 1024;

/// What to follow.
#[derive(Debug, Clone)]
pub struct Follow {
    pub path: PathBuf,
    /// The newest XID already stored for this host (kernel time, ms UTC; see
    /// `store::events::newest_xid_ms`).
    pub stored_until_ms: Option<TsMs>,
}

/// Opens the log and starts the follower thread; `None` (said once in the log) when the log
/// cannot be opened, then NVML's events are the only source of XIDs.
pub fn spawn(
    follow: Follow,
    out: Sender<Event>,
    stop: Arc<AtomicBool>,
) -> Option<std::thread::JoinHandle<()>> {
    let clock = match BootClock::now() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the clocks to date kernel-log records; XIDs come from NVML events alone");
            return None;
        }
    };
    spawn_with_clock(follow, clock, out, stop)
}

fn spawn_with_clock(
    follow: Follow,
    clock: BootClock,
    out: Sender<Event>,
    stop: Arc<AtomicBool>,
) -> Option<std::thread::JoinHandle<()>> {
    let path = follow.path.clone();
    let (file, fifo) = match open(&path) {
        Ok(f) => f,
        Err(e) => {
            let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
                " (run as root or with CAP_SYSLOG, or set [xid] kernel_log = false)"
            } else {
                " (in a container, give it the host's /dev/kmsg; or set [xid] kernel_log = false)"
            };
            tracing::info!(path = %path.display(), error = %e, "the kernel log cannot be read: XIDs come from NVML events alone{hint}");
            return None;
        }
    };
    let mut f = Follower {
        clock,
        stored_until_ms: follow.stored_until_ms,
        gpus: HashMap::new(),
        skipped: 0,
    };
    let spawned = std::thread::Builder::new()
        .name("gpuwatch-kmsg".into())
        .spawn(move || {
            tracing::info!(path = %path.display(), "following the kernel log for XIDs");
            f.run(file, fifo, &path, &out, &stop);
        });
    match spawned {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the kernel-log thread; XIDs come from NVML events alone");
            None
        }
    }
}

/// Opens without blocking (a FIFO without a writer, a device), then reads blocking.
fn open(path: &Path) -> std::io::Result<(File, bool)> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this function owns; F_GETFL/F_SETFL take no pointers.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fifo = file.metadata()?.file_type().is_fifo();
    Ok((file, fifo))
}

struct Follower {
    clock: BootClock,
    stored_until_ms: Option<TsMs>,
    /// PCI address → UUID, from `NVRM: GPU at PCI:… GPU-…` records.
    gpus: HashMap<PciAddr, String>,
    /// History records skipped as already stored.
    skipped: u64,
}

impl Follower {
    fn run(
        &mut self,
        mut file: File,
        fifo: bool,
        path: &Path,
        out: &Sender<Event>,
        stop: &AtomicBool,
    ) {
        let mut buf = vec![0u8; READ_BUF];
        let mut partial: Vec<u8> = Vec::new();
        let mut overwritten = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let n = match file.read(&mut buf) {
                Ok(0) if fifo => {
                    // The writer closed the FIFO: wait (blocking open) for the next one.
                    match File::open(path) {
                        Ok(f) => {
                            file = f;
                            continue;
                        }
                        Err(e) => {
                            tracing::warn!(path = %path.display(), error = %e, "cannot reopen the kernel log; XIDs come from NVML events alone from now");
                            return;
                        }
                    }
                }
                Ok(0) => {
                    tracing::info!(path = %path.display(), skipped = self.skipped, "read the kernel log file to its end; it is not a live log");
                    return;
                }
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {
                    overwritten += 1;
                    if overwritten.is_power_of_two() {
                        tracing::warn!(
                            times = overwritten,
                            "kernel log records were overwritten before gpuwatch read them: XIDs among them are lost (NVML still reports them)"
                        );
                    }
                    continue;
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && buf.len() < MAX_READ_BUF => {
                    buf.resize(buf.len() * 2, 0);
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot read the kernel log; XIDs come from NVML events alone from now");
                    return;
                }
            };
            partial.extend_from_slice(&buf[..n]);
            let Some(end) = partial.iter().rposition(|&b| b == b'\n') else {
                continue;
            };
            let lines: Vec<u8> = partial.drain(..=end).collect();
            for line in String::from_utf8_lossy(&lines).lines() {
                if let Some(event) = self.line(line)
                    && out.send(event).is_err()
                {
                    return;
                }
            }
        }
    }

    /// The event of one line of the log, if it is an XID to send.
    fn line(&mut self, line: &str) -> Option<Event> {
        let r = record::parse(line)?;
        match nvrm::parse(r.text) {
            Ok(Some(Nvrm::GpuAt { pci, uuid })) => {
                self.gpus.insert(pci, uuid);
                None
            }
            Ok(Some(Nvrm::Xid(x))) => {
                let kernel_ms = self.clock.wall_ms(r.ts_us);
                if self.clock.before_open(r.ts_us)
                    && self
                        .stored_until_ms
                        .is_some_and(|s| kernel_ms <= s + HISTORY_SLACK_MS)
                {
                    self.skipped += 1;
                    return None;
                }
                Some(Event {
                    ts_ms: 0,
                    gpu_uuid: self.gpus.get(&x.pci).cloned(),
                    kind: "xid".into(),
                    code: Some(x.code),
                    message: x.text,
                    pci_bus_id: Some(x.pci.to_string()),
                    source: Some(EventSource::Kmsg),
                    kernel_ms: Some(kernel_ms),
                })
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(
                    seq = r.seq,
                    "an XID record in the kernel log cannot be read ({e}): {}",
                    r.text
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::mpsc;
    use std::time::Duration;

    const BOOT_MS: TsMs = 1_700_000_000_000;

    fn follow(path: &Path, stored: Option<TsMs>, opened_us: i64) -> Vec<Event> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let h = spawn_with_clock(
            Follow {
                path: path.to_path_buf(),
                stored_until_ms: stored,
            },
            BootClock::fixed(BOOT_MS, opened_us),
            tx,
            stop,
        )
        .expect("opens");
        h.join().expect("the follower ends at the end of a file");
        rx.try_iter().collect()
    }

    fn write_log(dir: &Path, lines: &[&str]) -> PathBuf {
        let p = dir.join("kmsg");
        let mut f = File::create(&p).unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
        p
    }

    const LOG: &[&str] = &[
        "6,100,1000000,-;Linux version 6.8",
        "4,101,2000000,-;NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d",
        " SUBSYSTEM=pci",
        "4,102,2000500,-;NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s",
        "4,103,3000000,-;NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>', name=<unknown>, DBE",
        "4,104,3500000,-;NVRM: Xid (PCI:0000:19:00) broken",
    ];

    #[test]
    fn xid_records_become_events_with_the_kernel_s_time_and_address() {
        let dir = tempfile::tempdir().unwrap();
        let events = follow(&write_log(dir.path(), LOG), None, 10_000_000);
        assert_eq!(events.len(), 2, "{events:?}");
        let (a, b) = (&events[0], &events[1]);
        assert_eq!((a.kind.as_str(), a.code, a.ts_ms), ("xid", Some(119), 0));
        assert_eq!(a.kernel_ms, Some(BOOT_MS + 2_000));
        assert_eq!(a.pci_bus_id.as_deref(), Some("0000:9b:00"));
        assert_eq!(
            a.gpu_uuid.as_deref(),
            Some("GPU-509665ad-b600-ac93-3616-d754b23d636d"),
            "named by the GPU-at record"
        );
        assert_eq!(a.source, Some(EventSource::Kmsg));
        assert!(
            a.message
                .starts_with("Xid (PCI:0000:9b:00): 119, pid=2024380")
        );
        assert_eq!((b.code, b.gpu_uuid.as_deref()), (Some(48), None));
        assert_eq!(b.kernel_ms, Some(BOOT_MS + 3_000));
    }

    #[test]
    fn history_already_stored_is_skipped_and_newer_records_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_log(dir.path(), LOG);
        // Stored up to the 119 (+2 s): the 48 (+3 s) is within the slack and skipped too.
        let events = follow(&path, Some(BOOT_MS + 2_000), 10_000_000);
        assert!(events.is_empty(), "within the slack: {events:?}");
        // Stored up to +1.9 s: the 48 is newer than that plus the slack.
        let events = follow(&path, Some(BOOT_MS + 1_900), 10_000_000);
        assert_eq!(
            events.iter().map(|e| e.code).collect::<Vec<_>>(),
            [Some(48)]
        );
        // Opened before the records were written: they are new, nothing is skipped.
        let events = follow(&path, Some(BOOT_MS + 5_000), 1_000_000);
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn an_unreadable_log_is_said_once_and_nothing_starts() {
        let (tx, _rx) = mpsc::channel();
        let none = spawn(
            Follow {
                path: PathBuf::from("/nonexistent/kmsg"),
                stored_until_ms: None,
            },
            tx,
            Arc::new(AtomicBool::new(false)),
        );
        assert!(none.is_none());
    }

    #[test]
    fn a_fifo_is_followed_live_across_writers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fifo");
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let _h = spawn_with_clock(
            Follow {
                path: path.clone(),
                stored_until_ms: None,
            },
            BootClock::fixed(BOOT_MS, 0),
            tx,
            stop.clone(),
        )
        .expect("opens without a writer");
        for (i, code) in [(1, 79), (2, 94)] {
            let mut w = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            writeln!(
                w,
                "4,{i},{i}000000,-;NVRM: Xid (PCI:0000:19:00): {code}, pid=1, name=x, m"
            )
            .unwrap();
            drop(w);
            let e = rx.recv_timeout(Duration::from_secs(10)).expect("an event");
            assert_eq!(e.code, Some(code));
        }
        stop.store(true, Ordering::Relaxed);
    }
}
