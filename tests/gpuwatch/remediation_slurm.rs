//! Taking a broken GPU's node out of service through real Slurm: Debian's slurmctld and
//! slurmd with munge, on loopback ports in a temporary directory. A simulated XID 79 (the GPU
//! fell off the bus) makes `gpuwatch gpu health --slurm` — Slurm's HealthCheckProgram —
//! first say what it would do (dry run), then drain the node with its reason; it does not
//! drain twice; a person's `scontrol update State=RESUME` is seen and respected for that
//! fault; the breaker refuses the next fault within the hour; every decision is audited.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::http_support::{Node, free_port, wait_for};

/// munged, slurmctld and slurmd of one test, killed on drop.
struct Slurm {
    dir: tempfile::TempDir,
    node: String,
    children: Vec<Child>,
}

impl Slurm {
    fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    fn start() -> Slurm {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        for sub in ["state", "spool", "munge"] {
            std::fs::create_dir_all(d.join(sub)).expect("dirs");
        }
        let key: Vec<u8> = (0..1024u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(d.join("munge/key"), key).expect("key");
        set_mode(&d.join("munge/key"), 0o600);
        set_mode(&d.join("munge"), 0o700);
        let node = format!("gw{}", free_port());
        let (ctld, slurmd) = (free_port(), free_port());
        let p = |s: &str| d.join(s).display().to_string();
        std::fs::write(
            d.join("slurm.conf"),
            format!(
                "ClusterName=gwtest\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={ctld}\n\
                 SlurmdPort={slurmd}\nSlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\n\
                 AuthInfo=socket={sock}\nCredType=cred/munge\nStateSaveLocation={state}\n\
                 SlurmdSpoolDir={spool}\nSlurmctldPidFile={cpid}\nSlurmdPidFile={dpid}\n\
                 SlurmctldLogFile={clog}\nSlurmdLogFile={dlog}\nProctrackType=proctrack/linuxproc\n\
                 TaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n\
                 AccountingStorageType=accounting_storage/none\nSelectType=select/linear\n\
                 MpiDefault=none\nReturnToService=2\nSchedulerType=sched/builtin\n\
                 NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN\n\
                 PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP\n",
                sock = p("munge/sock"),
                state = p("state"),
                spool = p("spool"),
                cpid = p("slurmctld.pid"),
                dpid = p("slurmd.pid"),
                clog = p("slurmctld.log"),
                dlog = p("slurmd.log"),
            ),
        )
        .expect("slurm.conf");
        let mut s = Slurm {
            dir,
            node,
            children: Vec::new(),
        };
        let d = s.dir.path().to_path_buf();
        let spawn = |cmd: &mut Command| cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn();
        s.children.push(
            spawn(
                Command::new("munged")
                    .arg("--foreground")
                    .arg("--force")
                    .arg(format!("--key-file={}", d.join("munge/key").display()))
                    .arg(format!("--socket={}", d.join("munge/sock").display()))
                    .arg(format!("--pid-file={}", d.join("munge/pid").display()))
                    .arg(format!("--log-file={}", d.join("munge/log").display()))
                    .arg(format!("--seed-file={}", d.join("munge/seed").display())),
            )
            .expect("munged (Debian's munge package; scripts/test.sh installs it)"),
        );
        wait_for("munge's socket", Duration::from_secs(10), || {
            d.join("munge/sock").exists().then_some(())
        });
        s.children.push(
            spawn(
                Command::new("slurmctld")
                    .args(["-D", "-i", "-f"])
                    .arg(s.conf()),
            )
            .expect("slurmctld (Debian's slurmctld; scripts/test.sh installs it)"),
        );
        s.children.push(
            spawn(
                Command::new("slurmd")
                    .args(["-D", "-N", &s.node, "-f"])
                    .arg(s.conf()),
            )
            .expect("slurmd (Debian's slurmd)"),
        );
        wait_for("the node registered", Duration::from_secs(60), || {
            let st = s.state();
            (st.starts_with("IDLE") && !st.contains("NOT_RESPONDING")).then_some(())
        });
        s
    }

    fn scontrol(&self, args: &[&str]) -> String {
        let o = Command::new("scontrol")
            .env("SLURM_CONF", self.conf())
            .args(args)
            .output()
            .expect("scontrol");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// One field of `scontrol show node -o` (`State`, `Reason`: the reason runs to the end).
    fn field(&self, key: &str) -> String {
        let line = self.scontrol(&["show", "node", "-o", &self.node]);
        let at = format!(" {key}=");
        match line.find(&at) {
            Some(i) if key == "Reason" => line[i + at.len()..].trim().to_string(),
            Some(i) => line[i + at.len()..]
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_string(),
            None => String::new(),
        }
    }

    fn state(&self) -> String {
        self.field("State")
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        for c in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// `gpuwatch gpu health --slurm` on the node's config: (exit code, stdout).
fn health(node: &Node, slurm: &Slurm) -> (i32, String) {
    health_with(node, slurm, &[])
}

fn health_with(node: &Node, slurm: &Slurm, extra: &[&str]) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .env_remove("RUST_LOG")
        .env("SLURM_CONF", slurm.conf())
        .args(["gpu", "health", "--slurm"])
        .args(extra)
        .arg("--config")
        .arg(&node.cfg)
        .output()
        .expect("gpuwatch");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

/// The remediation audit, oldest first: (result, fault, who).
fn audit(node: &Node) -> Vec<(String, String, String)> {
    let out = node.cli(&[
        "query",
        "--format",
        "json",
        "SELECT result, fault, who FROM remediation_audit ORDER BY id",
    ]);
    let v: Value = serde_json::from_str(&out).expect("json");
    v.as_array()
        .expect("an array of rows")
        .iter()
        .map(|r| {
            let get = |k: &str| r[k].as_str().unwrap_or("").to_string();
            (get("result"), get("fault"), get("who"))
        })
        .collect()
}

/// The node's config with `[remediation]` (`dry_run` as given) appended.
fn remediation(node: &Node, slurm: &Slurm, dry_run: bool) {
    let base = std::fs::read_to_string(&node.cfg).expect("config");
    let base = base
        .split("\n[remediation]")
        .next()
        .unwrap_or("")
        .to_string();
    std::fs::write(
        &node.cfg,
        format!(
            "{base}\n[remediation]\nenabled = true\ndry_run = {dry_run}\naction = \"slurm\"\n\
             node = \"{}\"\nmax_actions_per_hour = 1\n",
            slurm.node
        ),
    )
    .expect("config");
}

/// GPUs 2 and 3 fall off the bus at 2 s, with XID 79 on each (as the driver logs it).
const FALLEN: &str = r#"
[[gpu]]
model = "H100-SXM-80GB"
lost_at = "2s"
[[gpu]]
model = "H100-SXM-80GB"
lost_at = "2s"
[[event]]
gpu = 2
at = "2s"
xid = 79
[[event]]
gpu = 3
at = "2s"
xid = 79
"#;

#[test]
fn an_xid_79_drains_the_node_once_a_resume_is_respected_and_the_breaker_holds() {
    let slurm = Slurm::start();
    let node = Node::with_scenario("gw-slurm", 61, "", "", FALLEN);
    let mut d = node.start(&[]);
    wait_for("both GPUs judged lost", Duration::from_secs(40), || {
        let out = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
            .args(["gpu", "health", "--format", "json", "--config"])
            .arg(&node.cfg)
            .output()
            .ok()?;
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        let lost = v["faults"]
            .as_array()?
            .iter()
            .filter(|f| f["code"] == "gpu_lost")
            .count();
        (lost == 2).then_some(())
    });
    d.sigterm();

    // Remediation off: one line, nothing done.
    let (code, line) = health(&node, &slurm);
    assert_eq!(code, 1, "{line}");
    assert!(
        line.contains("gpu_lost") && line.contains("remediation is off"),
        "{line}"
    );
    assert!(slurm.state().starts_with("IDLE"), "{}", slurm.state());

    // Dry run first: says what it would do, records it once, changes nothing.
    remediation(&node, &slurm, true);
    for _ in 0..2 {
        let (_, line) = health(&node, &slurm);
        assert!(line.contains("dry run: would take node"), "{line}");
        assert!(line.contains("GPU 2 gpu_lost"), "{line}");
    }
    assert!(!slurm.state().contains("DRAIN"), "{}", slurm.state());
    let a = audit(&node);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].0, "dry_run");

    // For real — but `--dry-run` on the command line still only says it.
    remediation(&node, &slurm, false);
    let (_, line) = health_with(&node, &slurm, &["--dry-run"]);
    assert!(line.contains("dry run: would take node"), "{line}");
    assert!(!slurm.state().contains("DRAIN"), "{}", slurm.state());
    // Drained, with gpuwatch's reason; a second run does not drain again.
    let (code, line) = health(&node, &slurm);
    assert_eq!(code, 1);
    assert!(
        line.contains("took node") && line.contains("(drain)"),
        "{line}"
    );
    assert!(slurm.state().contains("DRAIN"), "{}", slurm.state());
    let reason = slurm.field("Reason");
    assert!(reason.starts_with("gpuwatch: GPU 2 gpu_lost"), "{reason}");
    let (_, line) = health(&node, &slurm);
    assert!(line.contains("already out of service"), "{line}");
    let a = audit(&node);
    let results: Vec<&str> = a.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(results, ["dry_run", "done"], "{a:?}");
    assert!(a[1].1.ends_with(":gpu_lost"));

    // A person resumes the node: seen, recorded, and GPU 2's fault never drains it again.
    // GPU 3's fault is new, but the breaker (1 an hour) refuses it: the node stays in.
    slurm.scontrol(&[
        "update",
        &format!("NodeName={}", slurm.node),
        "State=RESUME",
    ]);
    wait_for("resumed", Duration::from_secs(10), || {
        (!slurm.state().contains("DRAIN")).then_some(())
    });
    let (_, line) = health(&node, &slurm);
    assert!(line.contains("breaker open"), "{line}");
    assert!(line.contains("GPU 3 gpu_lost"), "{line}");
    assert!(!slurm.state().contains("DRAIN"), "{}", slurm.state());
    let (_, again) = health(&node, &slurm);
    assert!(again.contains("breaker open"), "{again}");
    let a = audit(&node);
    let results: Vec<&str> = a.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        results,
        ["dry_run", "done", "resumed_by_person", "refused_breaker"],
        "{a:?}"
    );
    assert!(a[2].2.starts_with("a person"), "{a:?}");
    assert_eq!(a[2].1, a[1].1, "the resume is of the drained fault");
    assert_ne!(a[3].1, a[1].1, "the refused fault is GPU 3's");
}
