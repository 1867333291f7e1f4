//! Alerts carry where the GPU's work runs: a process's pod (from its placement) and a GPU's
//! holder (from the kubelet's allocation), through the one evaluation path (`replay` here,
//! the daemon's rules thread live), as labels that routes and silences match.

use std::path::Path;
use std::process::Command;

use gpuwatch::model::{GpuAllocation, GpuHolder, Placement, ProcessInfo, ProcessSample};
use gpuwatch::store::{self, StoreConfig, synth::TickGen};

const T0: i64 = 1_700_000_000_000;

fn build(db: &Path) {
    let mut st = store::open(db, &StoreConfig::new("node-1")).expect("open");
    let mut tg = TickGen::new(3, 0);
    let uuids: Vec<String> = (0..3).map(|i| tg.uuid(i)).collect();
    let placed = Placement {
        runtime: Some("containerd".into()),
        container_id: Some("ab".repeat(32)),
        pod: Some("llm-ft-7".into()),
        namespace: Some("research".into()),
        container: Some("trainer".into()),
        ..Placement::default()
    };
    for k in 0..600i64 {
        let ts = T0 + k * 1000;
        let mut b = tg.tick(ts);
        // Every GPU runs hot (slowdown at 87 °C): gpu_overheating fires on all three.
        for s in &mut b.samples {
            s.temp_c = Some(86);
        }
        b.processes = vec![ProcessSample {
            ts_ms: ts,
            gpu_uuid: uuids[0].clone(),
            process: ProcessInfo {
                pid: 4242,
                start_time_ms: T0 - 1000,
                name: Some("python".into()),
                placement: Some(std::sync::Arc::new(placed.clone())),
                ..ProcessInfo::default()
            },
            used_mem_bytes: Some(1 << 30),
        }];
        if k == 0 {
            b.allocations = vec![GpuAllocation {
                gpu_uuid: uuids[1].clone(),
                holder: Some(GpuHolder {
                    pod: "eval-3".into(),
                    namespace: "prod-eval".into(),
                    container: "runner".into(),
                    resource: "nvidia.com/gpu".into(),
                    job: None,
                }),
            }];
        }
        st.write_tick(&b).expect("write");
    }
}

/// `gpuwatch replay` over `db` (the default rules, or `rules`): every transition to firing,
/// and the output for messages.
fn replay_firing(db: &Path, rules: Option<&Path>) -> (Vec<serde_json::Value>, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuwatch"));
    c.args(["replay", "--format", "jsonl", "--db"]).arg(db);
    if let Some(r) = rules {
        c.arg("--rules").arg(r);
    }
    let o = c.output().expect("replay");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let fired = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .flat_map(|v| match v {
            serde_json::Value::Array(a) => a,
            v => vec![v],
        })
        .filter(|t| t["state"] == "firing")
        .collect();
    (fired, out)
}

#[test]
fn alerts_are_labelled_with_the_pod_of_the_gpu() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("g.db");
    build(&db);
    let (fired, out) = replay_firing(&db, None);
    let fired: Vec<serde_json::Value> = fired
        .into_iter()
        .filter(|t| t["rule"] == "gpu_overheating")
        .collect();
    let labels = |gpu: i64| {
        fired
            .iter()
            .find(|t| t["gpu"] == gpu)
            .map(|t| t["labels"].clone())
            .unwrap_or_else(|| panic!("no overheating alert for GPU {gpu} in {out}"))
    };
    // GPU 0: its one process runs in pod research/llm-ft-7.
    let l0 = labels(0);
    assert_eq!(l0["pod"], "llm-ft-7", "{l0}");
    assert_eq!(l0["namespace"], "research");
    assert_eq!(l0["container"], "trainer");
    // GPU 1: no process visible, but the kubelet allocated it to prod-eval/eval-3.
    let l1 = labels(1);
    assert_eq!(l1["pod"], "eval-3", "{l1}");
    assert_eq!(l1["namespace"], "prod-eval");
    // GPU 2: nothing says who holds it: no pod label at all (unknown, not "none").
    let l2 = labels(2);
    assert!(
        l2.get("pod").is_none() && l2.get("namespace").is_none(),
        "{l2}"
    );

    // Routes and silences match these labels like any other.
    use gpuwatch::matcher::Matcher;
    let as_map = |v: &serde_json::Value| -> std::collections::BTreeMap<String, String> {
        v.as_object()
            .expect("labels")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect()
    };
    let prod = Matcher::parse("namespace=~prod-.*").expect("matcher");
    let research = Matcher::parse("namespace=research").expect("matcher");
    assert!(prod.matches(&as_map(&l1)) && !prod.matches(&as_map(&l0)));
    assert!(research.matches(&as_map(&l0)) && !research.matches(&as_map(&l2)));
}

/// Six H100s on a host: five in one pod's training job at 95 % and one alone in another
/// pod at 20 %. Compared host-wide, the lone GPU looks like a straggler; compared with its
/// own job's GPUs (none), it is not one.
#[test]
fn stragglers_are_found_among_the_gpus_of_one_job_only() {
    let run = |pods: bool| {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("g.db");
        let mut st = store::open(&db, &StoreConfig::new("node-1")).expect("open");
        let mut tg = TickGen::new(6, 0);
        let uuids: Vec<String> = (0..6).map(|i| tg.uuid(i)).collect();
        for k in 0..900i64 {
            let ts = T0 + k * 1000;
            let mut b = tg.tick(ts);
            for (i, s) in b.samples.iter_mut().enumerate() {
                s.util_gpu_pct = Some(if i == 5 { 20 } else { 95 });
                s.mem_used_bytes = Some(40 << 30);
                s.temp_c = Some(60);
                s.clock_sm_mhz = Some(1980);
            }
            if k == 0 && pods {
                b.allocations = uuids
                    .iter()
                    .enumerate()
                    .map(|(i, u)| GpuAllocation {
                        gpu_uuid: u.clone(),
                        holder: Some(GpuHolder {
                            pod: if i == 5 {
                                "notebook-1".into()
                            } else {
                                "llm-ft-7".into()
                            },
                            namespace: "research".into(),
                            container: "main".into(),
                            resource: "nvidia.com/gpu".into(),
                            job: None,
                        }),
                    })
                    .collect();
            }
            st.write_tick(&b).expect("write");
        }
        drop(st);
        let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
            .args(["replay", "--format", "jsonl", "--db"])
            .arg(&db)
            .output()
            .expect("replay");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains("\"gpu_straggler\"") && l.contains("\"firing\""))
            .count()
    };
    assert!(
        run(false) > 0,
        "without pods the lone GPU is compared host-wide"
    );
    assert_eq!(run(true), 0, "with pods it has no peers: no straggler");
}

/// `inhibits_job`: while a fault fires on one GPU of a training job, its consequences on the
/// job's other GPUs of the host are muted (one incident, its cause reported); a GPU of
/// another job is not, nor the fault's own GPU (that is `inhibits`). The job here is a
/// Slurm job; its id is the alerts' `training_job`.
#[test]
fn a_fault_mutes_its_consequences_on_the_gpus_of_the_same_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("g.db");
    let rules = dir.path().join("r.toml");
    std::fs::write(
        &rules,
        r#"
[[rule]]
name = "cause"
severity = "critical"
condition = "temp > 80"
for = "30s"
inhibits_job = ["effect"]
summary = "GPU {gpu} of job {training_job} is hot"

[[rule]]
name = "effect"
severity = "warning"
condition = "util_gpu < 5"
for = "30s"
summary = "GPU {gpu} idle"
"#,
    )
    .expect("rules");
    let mut st = store::open(&db, &StoreConfig::new("node-1")).expect("open");
    let mut tg = TickGen::new(3, 0);
    let uuids: Vec<String> = (0..3).map(|i| tg.uuid(i)).collect();
    let job = |id: u64| Placement {
        slurm_job: Some(id),
        slurm_step: Some("0".into()),
        ..Placement::default()
    };
    for k in 0..300i64 {
        let ts = T0 + k * 1000;
        let mut b = tg.tick(ts);
        for (i, s) in b.samples.iter_mut().enumerate() {
            s.util_gpu_pct = Some(0);
            s.temp_c = Some(if i == 0 { 86 } else { 50 });
        }
        b.processes = (0..3)
            .map(|g| ProcessSample {
                ts_ms: ts,
                gpu_uuid: uuids[g].clone(),
                process: ProcessInfo {
                    pid: 5000 + g as u32,
                    start_time_ms: T0 - 1000,
                    name: Some("python".into()),
                    placement: Some(std::sync::Arc::new(job(if g == 2 { 5555 } else { 4242 }))),
                    ..ProcessInfo::default()
                },
                used_mem_bytes: Some(1 << 30),
            })
            .collect();
        st.write_tick(&b).expect("write");
    }
    drop(st);
    let (fired, out) = replay_firing(&db, Some(&rules));
    let on = |rule: &str| -> Vec<i64> {
        fired
            .iter()
            .filter(|t| t["rule"] == rule)
            .filter_map(|t| t["gpu"].as_i64())
            .collect()
    };
    assert_eq!(on("cause"), [0], "{out}");
    assert_eq!(
        on("effect"),
        [0, 2],
        "GPU 1 works for job 4242 beside the fault: muted; the fault's own GPU is `inhibits`' business; {out}"
    );
    let cause = fired.iter().find(|t| t["rule"] == "cause").expect("cause");
    assert_eq!(cause["labels"]["training_job"], "4242", "{cause}");
    assert!(
        cause["summary"]
            .as_str()
            .is_some_and(|s| s.contains("job 4242")),
        "{cause}"
    );
}
