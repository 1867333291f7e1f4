//! The hang rule against a real Prometheus: the job's per-GPU step series (backfilled with
//! `promtool tsdb create-blocks-from openmetrics`) stop for 15 minutes while the simulated
//! GPUs show the NCCL signature; gpuwatch fetches the series, joins them to the GPUs by their
//! `gpu` label, and `replay` finds the hang on both GPUs and its end. Then Prometheus is
//! stopped: the fetcher records the failure and the live engine reports
//! `training_metrics_unavailable`, not a hang.

use gpuwatch::alerts::engine::{Engine, EngineOptions};
use gpuwatch::model::TrainingWrite;
use gpuwatch::sim::{SimGpus, find_fake_library};
use gpuwatch::store;
use gpuwatch::training::TrainingFetcher;

use crate::training_support::{
    HOST, Prometheus, backfill, config, replay_jsonl, require_tools, sample_on_sim_clock,
    sim_daemon_config, store_training,
};

const SCRAPE_S: i64 = 15;
const MINUTES: i64 = 50;
const HANG: (i64, i64) = (30 * 60, 45 * 60);

/// Two H100s training at 95 %; from 30:00 to 45:00 utilisation 100 % at 90 W (a stuck collective).
const GPUS: &str = r#"
[scenario]
name = "prom-hang"
duration = "50m"
[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
util_gpu = { value = 95, noise = 3 }
[[gpu.timeline]]
from = "30m"
to = "45m"
util_gpu = 100
power_w = 90
[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
util_gpu = { value = 94, noise = 3 }
[[gpu.timeline]]
from = "30m"
to = "45m"
util_gpu = 100
power_w = 92
[[process]]
pid = 4000001
name = "python"
gpus = [0]
mem_mib = 60000
[[process]]
pid = 4000002
name = "python"
gpus = [1]
mem_mib = 60000
"#;

/// OpenMetrics: `training_step{gpu, job}` scraped every 15 s, frozen during the hang.
fn steps(t0_s: i64) -> String {
    let mut out = String::from("# TYPE training_step gauge\n");
    for gpu in 0..2 {
        let mut step = 0;
        for k in 0..=(MINUTES * 60 / SCRAPE_S) {
            let t = k * SCRAPE_S;
            if !(HANG.0..HANG.1).contains(&t) {
                step += 3;
            }
            out.push_str(&format!(
                "training_step{{gpu=\"{gpu}\",job=\"llm\"}} {step} {}\n",
                t0_s + t
            ));
        }
    }
    out.push_str("# EOF\n");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hang_seen_through_prometheus_is_found_and_an_outage_is_not_a_hang() {
    require_tools();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("tsdb");
    std::fs::create_dir(&data).expect("mkdir");
    let t0_s = (chrono::Utc::now().timestamp() - 2 * 3600) / 60 * 60;
    let (t0, t_end) = (t0_s * 1000, (t0_s + MINUTES * 60) * 1000);
    backfill(dir.path(), "steps.om", &steps(t0_s), &data);
    let mut prom = Prometheus::start(dir.path(), &data);

    // The GPUs of the same 50 minutes, sampled by the daemon on the simulated clock.
    let sim = SimGpus::prepare(
        &find_fake_library().expect("fake NVML built"),
        GPUS,
        "prom-hang",
    )
    .expect("scenario");
    let db = dir.path().join("g.db");
    sample_on_sim_clock(sim_daemon_config(&db), &sim, t0).await;

    // The training series of that range, through the fetcher, into the store.
    let fetcher = TrainingFetcher::new(&config(&prom.url()), HOST).expect("fetcher");
    let points = fetcher.fetch_range(t0, t_end).await.expect("fetch");
    assert!(points.len() > 300, "{} points", points.len());
    store_training(&db, points);

    // replay: the hang on both GPUs, a few minutes in, resolved when steps resume.
    let lines = replay_jsonl(&db);
    let at = |v: &serde_json::Value| {
        let ms = chrono::DateTime::parse_from_rfc3339(v["at"].as_str().expect("at"))
            .expect("time")
            .timestamp_millis();
        (ms - t0) as f64 / 60_000.0
    };
    for gpu in 0..2u64 {
        let fired = lines
            .iter()
            .find(|v| v["rule"] == "training_hang" && v["state"] == "firing" && v["gpu"] == gpu)
            .unwrap_or_else(|| panic!("no hang on GPU {gpu}: {lines:?}"));
        let m = at(fired);
        assert!(
            (31.0..=37.0).contains(&m),
            "hang on GPU {gpu} found at {m:.1} min (began at 30)"
        );
        assert_eq!(
            fired["labels"]["job"],
            serde_json::Value::Null,
            "job is not an identity label"
        );
        assert!(
            fired["summary"]
                .as_str()
                .expect("summary")
                .contains("job llm"),
            "{fired}"
        );
        let resolved = lines
            .iter()
            .find(|v| v["rule"] == "training_hang" && v["state"] == "resolved" && v["gpu"] == gpu)
            .unwrap_or_else(|| panic!("hang never resolved on GPU {gpu}: {lines:?}"));
        assert!(
            (45.0..=47.0).contains(&at(resolved)),
            "resolved at {:.1}",
            at(resolved)
        );
    }
    let others: Vec<_> = lines
        .iter()
        .filter(|v| v["rule"] != "training_hang")
        .collect();
    assert!(others.is_empty(), "false alarms: {others:?}");

    // Prometheus stops: the poll fails, the status is stored, and the live engine says the
    // metrics are unavailable instead of calling anything a hang.
    prom.stop();
    let mut fetcher = TrainingFetcher::new(&config(&prom.url()), HOST).expect("fetcher");
    let failed = fetcher.poll(t_end).await;
    assert!(
        failed.sources.iter().all(|s| s.error.is_some()),
        "{failed:?}"
    );
    let mut st = store::open(&db, &store::StoreConfig::new(HOST)).expect("open");
    // The host had training metrics before (an earlier successful poll).
    let ok = TrainingWrite {
        points: Vec::new(),
        sources: failed
            .sources
            .iter()
            .map(|s| gpuwatch::model::TrainingSourceUpdate {
                error: None,
                series: 2,
                points: 10,
                newest_point_ms: Some(t_end),
                at_ms: t_end - 60_000,
                ..s.clone()
            })
            .collect(),
    };
    st.write_training(&ok).expect("earlier success");
    st.write_training(&failed).expect("failure");
    drop(st);
    let conn = store::open_read_only(&db).expect("read-only");
    let rules = gpuwatch::rules::load_configured(true, &[]).expect("rules");
    let mut e =
        Engine::primed(&conn, rules, EngineOptions::default(), t0 + 29 * 60_000).expect("primed");
    e.refresh_training_sources(&conn).expect("sources");
    let mut firing = Vec::new();
    while let Some(t) = e.world_mut().next_sample_time(&conn, t_end).expect("next") {
        e.advance(&conn, t).expect("advance");
        firing.extend(
            e.evaluate(t)
                .into_iter()
                .filter(|tr| tr.state == "firing")
                .map(|tr| tr.rule),
        );
    }
    assert!(
        firing.contains(&"training_metrics_unavailable".to_string()),
        "{firing:?}"
    );
    assert!(
        !firing.contains(&"training_hang".to_string()),
        "an outage is not a hang: {firing:?}"
    );
}
