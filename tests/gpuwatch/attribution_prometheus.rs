//! Training metrics joined by pod, against a real Prometheus: a scraped job's series carry
//! `pod` and `namespace` labels and no GPU label; the kubelet (a pod-resources server on a
//! unix socket) says which pod holds which GPU. Both GPUs look like a stuck collective from
//! 30:00 to 45:00, but only the first pod's steps stop: the hang is found on that pod's GPU,
//! labelled with the pod, and not on the GPU of the pod that keeps stepping. `status` says
//! which series each GPU's rules read and why.

use std::time::Duration;

use gpuwatch::attribution::kubelet::server;
use gpuwatch::config::Kubelet;
use gpuwatch::sim::{SimGpus, find_fake_library};
use gpuwatch::training::TrainingFetcher;

use crate::attribution_support;
use crate::attribution_support::UUIDS;
use crate::training_support::{
    HOST, Prometheus, backfill, config, replay_jsonl, require_tools, sample_on_sim_clock,
    sim_daemon_config, store_training,
};

const SCRAPE_S: i64 = 15;
const MINUTES: i64 = 50;
const HANG: (i64, i64) = (30 * 60, 45 * 60);

/// Two H100s training (one process each, holding 60 GB); from 30:00 to 45:00 both at 100 %
/// and ~90 W (what a hang looks like).
fn gpus() -> String {
    let mut s = String::from("[scenario]\nname = \"pod-hang\"\nduration = \"50m\"\n");
    for uuid in UUIDS {
        s.push_str(&format!(
            "[[gpu]]\nmodel = \"H100-SXM-80GB\"\nuuid = \"{uuid}\"\n\
             [[gpu.timeline]]\nutil_gpu = {{ value = 95, noise = 3 }}\n\
             [[gpu.timeline]]\nfrom = \"30m\"\nto = \"45m\"\nutil_gpu = 100\npower_w = 90\n"
        ));
    }
    for gpu in 0..2 {
        s.push_str(&format!(
            "[[process]]\npid = {}\nname = \"python\"\ngpus = [{gpu}]\nmem_mib = 60000\n",
            4_000_001 + gpu
        ));
    }
    s
}

/// OpenMetrics: `training_step{job, namespace, pod}` every 15 s; `llm-ft-7` freezes during
/// the hang, `eval-3` keeps stepping.
fn steps(t0_s: i64) -> String {
    let mut out = String::from("# TYPE training_step gauge\n");
    for (ns, pod, stalls) in [
        ("research", "llm-ft-7", true),
        ("prod-eval", "eval-3", false),
    ] {
        let mut step = 0;
        for k in 0..=(MINUTES * 60 / SCRAPE_S) {
            let t = k * SCRAPE_S;
            if !(stalls && (HANG.0..HANG.1).contains(&t)) {
                step += 3;
            }
            out.push_str(&format!(
                "training_step{{job=\"train\",namespace=\"{ns}\",pod=\"{pod}\"}} {step} {}\n",
                t0_s + t
            ));
        }
    }
    out.push_str("# EOF\n");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_labelled_series_joins_the_pods_gpu_and_its_hang_names_the_pod() {
    require_tools();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("tsdb");
    std::fs::create_dir(&data).expect("mkdir");
    let t0_s = (chrono::Utc::now().timestamp() - 2 * 3600) / 60 * 60;
    let (t0, t_end) = (t0_s * 1000, (t0_s + MINUTES * 60) * 1000);
    backfill(dir.path(), "steps.om", &steps(t0_s), &data);
    let prom = Prometheus::start(dir.path(), &data);

    // The kubelet, on a unix socket in the temp dir.
    let sock = dir.path().join("kubelet.sock");
    let list = server::PodList::default();
    list.set(attribution_support::two_pods());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn({
        let (sock, list) = (sock.clone(), list.clone());
        async move {
            server::serve(&sock, list, async {
                let _ = stop_rx.await;
            })
            .await
        }
    });
    for _ in 0..200 {
        if sock.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(sock.exists(), "the kubelet socket did not appear");

    // The daemon samples the 50 minutes on the simulated clock, asking the kubelet for pods
    // (it waits for the kubelet's first answer before its first tick).
    let sim = SimGpus::prepare(
        &find_fake_library().expect("fake NVML built"),
        &gpus(),
        "pod-hang",
    )
    .expect("scenario");
    let db = dir.path().join("g.db");
    let mut cfg = sim_daemon_config(&db);
    cfg.kubernetes.enabled = Kubelet::On;
    cfg.kubernetes.pod_resources_socket = sock.clone();
    sample_on_sim_clock(cfg, &sim, t0).await;
    let _ = stop_tx.send(());
    serving.await.expect("join").expect("served");

    // The training series of that range, from Prometheus, into the store.
    let fetcher = TrainingFetcher::new(&config(&prom.url()), HOST).expect("fetcher");
    let points = fetcher.fetch_range(t0, t_end).await.expect("fetch");
    assert!(points.len() > 300, "{} points", points.len());
    assert!(
        points
            .iter()
            .all(|p| p.labels.iter().any(|(k, _)| k == "pod")),
        "the series keep their pod labels"
    );
    store_training(&db, points);

    // replay: the hang on GPU 0 only, with its pod's labels.
    let lines = replay_jsonl(&db);
    let hangs: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|v| v["rule"] == "training_hang" && v["state"] == "firing")
        .collect();
    assert_eq!(
        hangs.len(),
        1,
        "one hang, on the stalled pod's GPU: {lines:?}"
    );
    let h = hangs[0];
    assert_eq!(h["gpu"], 0, "{h}");
    assert_eq!(h["labels"]["pod"], "llm-ft-7", "{h}");
    assert_eq!(h["labels"]["namespace"], "research", "{h}");
    assert_eq!(h["labels"]["container"], "trainer", "{h}");
    let at_min = (chrono::DateTime::parse_from_rfc3339(h["at"].as_str().expect("at"))
        .expect("time")
        .timestamp_millis()
        - t0) as f64
        / 60_000.0;
    assert!(
        (31.0..=37.0).contains(&at_min),
        "found at {at_min:.1} min (began at 30)"
    );

    // status: which series each GPU's rules read, and why.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args(["status", "--format", "json", "--db"])
        .arg(&db)
        .output()
        .expect("status");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    for (gpu, pod) in [(0, "llm-ft-7"), (1, "eval-3")] {
        let step = &v["gpus"][gpu]["training"]["step"];
        assert_eq!(step["by"], "pod", "{step}");
        assert!(
            step["series"]
                .as_str()
                .is_some_and(|s| s.contains(&format!("pod=\"{pod}\""))),
            "{step}"
        );
        assert!(
            step["why"].as_str().is_some_and(|w| w.contains(pod)),
            "{step}"
        );
        assert!(v["gpus"][gpu]["training"]["loss"]["series"].is_null());
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args(["status", "--db"])
        .arg(&db)
        .output()
        .expect("status");
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("GPU 0 step: training_step{job=\"train\",namespace=\"research\",pod=\"llm-ft-7\"}: its pod label names pod research/llm-ft-7, which holds this GPU"),
        "{table}"
    );
}
