//! Resolves GPU process PIDs to who they are, through /proc.
//!
//! Invariants:
//! - `(pid, start_time_ms)` identifies a process; a PID reused by a new process is resolved
//!   again (the cache is keyed by both).
//! - Command lines are redacted before they leave this module.
//! - A PID that cannot be resolved (another PID namespace, already exited, or a simulated
//!   process) still yields a `ProcessInfo` with its PID. Static `overrides` (the simulated
//!   processes of a scenario, in the demo) take precedence over /proc.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::model::ProcessInfo;

use super::redact::Redactor;

/// Static process metadata for PIDs that /proc does not know (simulated processes).
#[derive(Debug, Clone, Default)]
pub struct ProcessOverrides {
    pub pids: HashMap<u32, ProcessInfo>,
    /// The GPUs are simulated (demo, tests): their PIDs are not processes of this machine,
    /// so the PID-namespace check of a real deployment does not apply.
    pub simulated: bool,
}

/// The kernel's inode number of the initial PID namespace (`PROC_PID_INIT_INO`): what
/// `/proc/self/ns/pid` names on the host (`pid:[4026531836]`).
const HOST_PID_NS_INODE: u64 = 0xEFFF_FFFC;

/// Which PID namespace this process runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PidNamespace {
    /// The host's: NVML's PIDs are ours, and NVML lists every process on the GPUs.
    Host,
    /// Another one (a container without `hostPID`/`--pid=host`): NVML lists only the
    /// processes this namespace sees, so a GPU's process list is incomplete.
    Other(u64),
    /// It could not be told (no `ns/pid` link).
    Unknown,
}

/// The PID namespace named by the `self/ns/pid` link under `proc_root` (normally `/proc`);
/// given a process's own directory (`/proc/1`), the `ns/pid` link under it.
pub fn pid_namespace(proc_root: &Path) -> PidNamespace {
    let link = fs::read_link(proc_root.join("self/ns/pid"))
        .or_else(|_| fs::read_link(proc_root.join("ns/pid")));
    let Ok(link) = link else {
        return PidNamespace::Unknown;
    };
    let text = link.to_string_lossy();
    match text
        .strip_prefix("pid:[")
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|n| n.parse::<u64>().ok())
    {
        Some(HOST_PID_NS_INODE) => PidNamespace::Host,
        Some(n) => PidNamespace::Other(n),
        None => PidNamespace::Unknown,
    }
}

/// Whether the procfs at `proc_root` shows the host's processes although this process runs
/// in another PID namespace: its `self` names a PID other than ours (the mount belongs to an
/// outer namespace), or its PID 1 is in the host's namespace.
pub fn shows_host_processes(proc_root: &Path) -> bool {
    let outer = fs::read_link(proc_root.join("self"))
        .ok()
        .and_then(|l| l.to_string_lossy().parse::<u32>().ok())
        .is_some_and(|pid| pid != std::process::id());
    outer || pid_namespace(&proc_root.join("1")) == PidNamespace::Host
}

#[derive(Debug)]
pub struct ProcResolver {
    root: PathBuf,
    pod_logs_dir: PathBuf,
    redactor: Redactor,
    boot_time_ms: i64,
    ticks_per_sec: i64,
    /// pid → resolved info (with start time) from the last time we saw it.
    cache: HashMap<u32, ProcessInfo>,
    overrides: ProcessOverrides,
    users: HashMap<u32, Option<String>>,
    /// PIDs /proc does not show (another PID namespace): not looked up again until this time.
    missing: HashMap<u32, std::time::Instant>,
    /// `/proc/PID/stat` kept open per cached process: each tick re-reads it with one `pread`
    /// (no path walk, open or close). A procfs file stays bound to the process it was opened
    /// for: once that process is gone the read fails (even if the PID was reused), and the
    /// path is opened again.
    stat_files: HashMap<u32, fs::File>,
}

/// The most `/proc/PID/stat` files kept open.
const MAX_OPEN_STAT_FILES: usize = 4096;

/// How long a PID that /proc does not show is not looked up again.
const MISSING_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

impl ProcResolver {
    /// A resolver reading `/proc` (see [`ProcResolver::with_roots`]).
    pub fn new(redactor: Redactor, overrides: ProcessOverrides) -> Self {
        Self::with_roots(
            redactor,
            overrides,
            Path::new(crate::config::DEFAULT_PROC_ROOT),
            Path::new(crate::config::DEFAULT_POD_LOGS_DIR),
        )
    }

    /// A resolver reading the host's processes under `proc_root` (the host's `/proc`
    /// mounted in gpuwatch's container) and pod names under `pod_logs_dir`.
    pub fn with_roots(
        redactor: Redactor,
        overrides: ProcessOverrides,
        proc_root: &Path,
        pod_logs_dir: &Path,
    ) -> Self {
        let root = proc_root.to_path_buf();
        let boot_time_ms = fs::read_to_string(root.join("stat"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("btime ").map(|v| v.trim().parse::<i64>()))
            })
            .and_then(Result::ok)
            .map_or(0, |s| s * 1000);
        // SAFETY: sysconf has no memory-safety preconditions.
        let tps = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        Self {
            root,
            pod_logs_dir: pod_logs_dir.to_path_buf(),
            redactor,
            boot_time_ms,
            ticks_per_sec: if tps > 0 { tps } else { 100 },
            cache: HashMap::new(),
            overrides,
            users: HashMap::new(),
            missing: HashMap::new(),
            stat_files: HashMap::new(),
        }
    }

    /// Who `pid` is right now. Reads /proc/PID/stat every call (to notice PID reuse) and the
    /// rest only when the process is new.
    pub fn resolve(&mut self, pid: u32) -> ProcessInfo {
        if let Some(info) = self.overrides.pids.get(&pid) {
            return info.clone();
        }
        let unknown = ProcessInfo {
            pid,
            ..ProcessInfo::default()
        };
        if self
            .missing
            .get(&pid)
            .is_some_and(|until| std::time::Instant::now() < *until)
        {
            return unknown;
        }
        let Some(start) = self.start_time_ms(pid) else {
            self.cache.remove(&pid);
            self.stat_files.remove(&pid);
            self.missing
                .insert(pid, std::time::Instant::now() + MISSING_RETRY);
            return unknown;
        };
        self.missing.remove(&pid);
        if let Some(info) = self.cache.get(&pid)
            && info.start_time_ms == start
        {
            return info.clone();
        }
        let info = self.read_process(pid, start);
        self.cache.insert(pid, info.clone());
        info
    }

    /// Forgets PIDs not in `live`, so the cache stays as small as the process table.
    pub fn retain(&mut self, live: &[u32]) {
        self.cache.retain(|pid, _| live.contains(pid));
        self.missing.retain(|pid, _| live.contains(pid));
        self.stat_files.retain(|pid, _| live.contains(pid));
    }

    /// The start time of the process `pid` is now, from its `stat` file: through the file
    /// kept open for it while that still reads, else by path (a new process, or none).
    fn start_time_ms(&mut self, pid: u32) -> Option<i64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 1024];
        if let Some(f) = self.stat_files.get(&pid) {
            if let Ok(n) = f.read_at(&mut buf, 0)
                && n > 0
                && n < buf.len()
                && let Some(start) = self.parse_start(&buf[..n])
            {
                return Some(start);
            }
            self.stat_files.remove(&pid);
        }
        let f = fs::File::open(self.root.join(pid.to_string()).join("stat")).ok()?;
        let n = f.read_at(&mut buf, 0).ok()?;
        let start = if n < buf.len() {
            self.parse_start(&buf[..n])?
        } else {
            // Longer than the buffer (an unusually long command name): read it whole.
            let mut all = Vec::new();
            std::io::Read::read_to_end(&mut &f, &mut all).ok()?;
            self.parse_start(&all)?
        };
        if self.stat_files.len() < MAX_OPEN_STAT_FILES {
            self.stat_files.insert(pid, f);
        }
        Some(start)
    }

    /// The start time in a `stat` file's contents.
    fn parse_start(&self, stat: &[u8]) -> Option<i64> {
        // The command name is in parentheses and may contain spaces or ')': split after the last ')'.
        let rest = std::str::from_utf8(&stat[stat.iter().rposition(|&b| b == b')')? + 1..]).ok()?;
        // Fields after ")" start at field 3 (state); starttime is field 22.
        let start_ticks: i64 = rest.split_whitespace().nth(19)?.parse().ok()?;
        Some(self.boot_time_ms + start_ticks * 1000 / self.ticks_per_sec)
    }

    fn read_process(&mut self, pid: u32, start_time_ms: i64) -> ProcessInfo {
        let dir = self.root.join(pid.to_string());
        let name = fs::read_to_string(dir.join("comm"))
            .ok()
            .map(|s| s.trim_end().to_string());
        let cmdline = fs::read(dir.join("cmdline")).ok().and_then(|raw| {
            let argv: Vec<String> = raw
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            (!argv.is_empty()).then(|| self.redactor.redact_argv(&argv))
        });
        let uid = fs::read_to_string(dir.join("status")).ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u32>().ok())
        });
        let user = uid.and_then(|u| self.user_name(u));
        let placement = crate::attribution::placement::of_process(&dir, &self.pod_logs_dir);
        ProcessInfo {
            pid,
            start_time_ms,
            name,
            cmdline,
            user,
            placement: placement.map(std::sync::Arc::new),
        }
    }

    fn user_name(&mut self, uid: u32) -> Option<String> {
        self.users
            .entry(uid)
            .or_insert_with(|| lookup_user(uid).or_else(|| Some(uid.to_string())))
            .clone()
    }
}

/// Looks a uid up with getpwuid_r (NSS-aware, thread-safe).
fn lookup_user(uid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: passwd is plain data; zeroed is a valid bit pattern for it.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call; buf outlives the use of pwd's fields.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: pw_name points into buf and is NUL-terminated per getpwuid_r's contract.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver() -> ProcResolver {
        ProcResolver::new(
            Redactor::new(&[]).expect("valid"),
            ProcessOverrides::default(),
        )
    }

    #[test]
    fn resolves_a_real_child_with_redaction() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30", "gpuwatch-test", "--api-key=SECRETVALUE"])
            .spawn()
            .expect("spawn sh");
        // `spawn` returns once the child exists, possibly before it has exec'd `sh` (its
        // /proc entry then still shows the test binary, and its cmdline may be empty): wait
        // for the exec, as a GPU process seen by NVML has long since done.
        let argv = format!("/proc/{}/cmdline", child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !std::fs::read(&argv).is_ok_and(|a| a.starts_with(b"sh\0"))
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut r = resolver();
        let info = r.resolve(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(info.pid, child.id());
        assert_eq!(info.name.as_deref(), Some("sh"));
        let cmd = info.cmdline.expect("cmdline");
        assert!(cmd.contains("--api-key=***"), "{cmd}");
        assert!(!cmd.contains("SECRETVALUE"), "{cmd}");
        assert!(info.user.is_some());
        let now = chrono::Utc::now().timestamp_millis();
        assert!(info.start_time_ms > now - 60_000 && info.start_time_ms <= now + 1000);
    }

    /// A process's `stat` stays open between ticks; once the process has exited and been
    /// reaped, that file no longer reads and the PID is unknown (not the old process).
    #[test]
    fn an_exited_process_is_not_kept_alive_by_its_open_stat_file() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        let mut r = resolver();
        let first = r.resolve(pid);
        assert!(first.start_time_ms > 0);
        assert!(r.stat_files.contains_key(&pid), "kept open");
        assert_eq!(
            r.resolve(pid),
            first,
            "the same process, from the open file"
        );
        let _ = child.kill();
        let _ = child.wait();
        let gone = r.resolve(pid);
        assert_eq!(
            (gone.start_time_ms, gone.name.as_deref()),
            (0, None),
            "{gone:?}"
        );
        assert!(!r.stat_files.contains_key(&pid));
    }

    /// The host's /proc mounted elsewhere (`[processes] proc_root`): a container's process
    /// is resolved there, placement included, once per (pid, start time).
    #[test]
    fn a_fixture_proc_root_resolves_pods_and_slurm_jobs() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = t.path().join("host-proc");
        let logs = t.path().join("pods");
        let uid = "7c1e6a4e-2c4b-4d3e-9f1a-0b2c3d4e5f60";
        std::fs::create_dir_all(logs.join(format!("research_llm-ft-7_{uid}/trainer")))
            .expect("pod dir");
        std::fs::create_dir_all(&root).expect("root");
        std::fs::write(root.join("stat"), "cpu 1 2 3\nbtime 1700000000\n").expect("stat");
        let id = "ab".repeat(32);
        let proc = |pid: u32, start_ticks: u64, cgroup: &str| {
            let d = root.join(pid.to_string());
            std::fs::create_dir_all(&d).expect("pid dir");
            let fields =
                format!("S 1 {pid} {pid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start_ticks} 0 0");
            std::fs::write(d.join("stat"), format!("{pid} (python3) {fields}")).expect("stat");
            std::fs::write(d.join("comm"), "python3\n").expect("comm");
            std::fs::write(d.join("status"), "Name:\tpython3\nUid:\t0\t0\t0\t0\n").expect("status");
            std::fs::write(d.join("cgroup"), cgroup).expect("cgroup");
        };
        let u = uid.replace('-', "_");
        proc(
            101,
            500,
            &format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{id}.scope\n"
            ),
        );
        proc(
            102,
            600,
            "0::/system.slice/slurmstepd.scope/job_77/step_1/user/task_0\n",
        );
        let mut r = ProcResolver::with_roots(
            Redactor::new(&[]).expect("valid"),
            ProcessOverrides::default(),
            &root,
            &logs,
        );
        let a = r.resolve(101);
        assert_eq!(a.name.as_deref(), Some("python3"));
        assert_eq!(
            a.start_time_ms,
            1_700_000_000_000 + 500 * 1000 / r.ticks_per_sec
        );
        let pa = a.placement.expect("placement");
        assert_eq!(
            (
                pa.pod.as_deref(),
                pa.namespace.as_deref(),
                pa.container.as_deref()
            ),
            (Some("llm-ft-7"), Some("research"), Some("trainer"))
        );
        assert_eq!(pa.container_id.as_deref(), Some(id.as_str()));
        let b = r.resolve(102).placement.expect("placement");
        assert_eq!(
            (b.slurm_job, b.slurm_step.as_deref()),
            (Some(77), Some("1"))
        );
        // Resolved once: a changed cgroup file is not read again for the same process...
        std::fs::write(root.join("101/cgroup"), "0::/\n").expect("rewrite");
        assert_eq!(
            r.resolve(101).placement.expect("cached").pod.as_deref(),
            Some("llm-ft-7")
        );
        // ...but a PID reused by a new process (another start time) is resolved again.
        proc(101, 900, "0::/\n");
        assert_eq!(r.resolve(101).placement.expect("new").pod, None);
        // A PID NVML reports that the proc root does not show: known by PID, nothing else.
        let gone = r.resolve(4242);
        assert_eq!((gone.name, gone.placement), (None, None));
    }

    #[test]
    fn overrides_answer_for_simulated_pids() {
        let mut o = ProcessOverrides::default();
        let pid = 4_000_000_000;
        o.pids.insert(
            pid,
            ProcessInfo {
                pid,
                start_time_ms: 5,
                name: Some("python".into()),
                cmdline: None,
                user: Some("alice".into()),
                placement: None,
            },
        );
        let mut r = ProcResolver::new(Redactor::new(&[]).expect("valid"), o);
        assert_eq!(r.resolve(pid).name.as_deref(), Some("python"));
        assert_eq!(r.resolve(pid - 1).name, None);
    }

    #[test]
    fn pid_namespace_from_the_ns_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ns = |target: &str| {
            let d = dir.path().join(target.replace([':', '[', ']'], "_"));
            std::fs::create_dir_all(d.join("self/ns")).expect("mkdir");
            std::os::unix::fs::symlink(target, d.join("self/ns/pid")).expect("symlink");
            pid_namespace(&d)
        };
        assert_eq!(ns("pid:[4026531836]"), PidNamespace::Host);
        assert_eq!(ns("pid:[4026532301]"), PidNamespace::Other(4_026_532_301));
        assert_eq!(ns("garbage"), PidNamespace::Unknown);
        assert_eq!(
            pid_namespace(&dir.path().join("missing")),
            PidNamespace::Unknown
        );
        assert_ne!(pid_namespace(Path::new("/proc")), PidNamespace::Unknown);
    }

    #[test]
    fn self_process_is_cached_and_stable() {
        let mut r = resolver();
        let me = std::process::id();
        let a = r.resolve(me);
        let b = r.resolve(me);
        assert_eq!(a, b);
        assert!(a.start_time_ms > 0);
    }
}
