//! The shipped MIG scenario end to end (`scenarios/mig-h100.toml`: an H100 in seven 1g.10gb
//! instances, the slice with GPU instance id 11 held but idle from 5 minutes): `status` shows
//! the seven instances as GPUs of their own (`0/7` … `0/13`), `gpu_idle` fires for the idle
//! slice only, addressed `0/11` in its labels, JSON and silences, and `/metrics` carries
//! dcgm-exporter's MIG labels (the parent's `gpu` and `UUID` with `GPU_I_ID` and
//! `GPU_I_PROFILE`).

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::http_support::{self, series_value, wait_for};

fn gpuwatch(args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .env_remove("RUST_LOG")
        .args(args)
        .output()
        .expect("gpuwatch");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

fn scenario() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/mig-h100.toml").to_string()
}

#[test]
fn seven_instances_are_seven_gpus_and_only_the_idle_slice_alerts() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("mig.db");
    let db = db.to_str().expect("utf-8");
    let (ok, out) = gpuwatch(&[
        "demo",
        "--scenario",
        &scenario(),
        "--speed",
        "600",
        "--duration",
        "40m",
        "--every",
        "1h",
        "--db",
        db,
    ]);
    assert!(ok, "{out}");

    let (ok, status) = gpuwatch(&["status", "--db", db, "--format", "json"]);
    assert!(ok);
    let v: Value = serde_json::from_str(&status).expect("json");
    let gpus = v["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), 8, "the H100 and its 7 instances");
    let parent = &gpus[0];
    assert!(parent["gpu_instance_id"].is_null());
    let instances: Vec<&Value> = gpus[1..].iter().collect();
    let addresses: Vec<&str> = instances
        .iter()
        .filter_map(|g| g["address"].as_str())
        .collect();
    assert_eq!(
        addresses,
        ["0/7", "0/8", "0/9", "0/10", "0/11", "0/12", "0/13"]
    );
    for g in &instances {
        assert_eq!(g["index"], 0);
        assert_eq!(g["gpu_instance_profile"], "1g.10gb");
        assert_eq!(g["parent_uuid"], parent["uuid"]);
        assert!(g["uuid"].as_str().is_some_and(|u| u.starts_with("MIG-")));
        assert_eq!(g["mem_total_bytes"], 9_984u64 << 20);
        assert!(g["util_gpu_pct"].is_null(), "no utilisation per instance");
    }
    let (_, table) = gpuwatch(&["status", "--db", db]);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("0/11") && l.contains("MIG 1g.10gb (GI 11)")),
        "{table}"
    );

    let (ok, alerts) = gpuwatch(&["alerts", "--db", db, "--format", "json"]);
    assert!(ok);
    let a: Value = serde_json::from_str(&alerts).expect("json");
    let a = a
        .as_array()
        .or_else(|| a["alerts"].as_array())
        .expect("alerts");
    let idle: Vec<&Value> = a.iter().filter(|x| x["rule"] == "gpu_idle").collect();
    assert_eq!(idle.len(), 1, "one idle slice: {alerts}");
    assert_eq!(idle[0]["gpu_index"], "0/11");
    assert_eq!(idle[0]["labels"]["gpu"], "0/11");
    assert_eq!(idle[0]["labels"]["gpu_instance_id"], "11");
    assert_eq!(idle[0]["labels"]["gpu_instance_profile"], "1g.10gb");
    assert_eq!(idle[0]["gpu_uuid"], instances[4]["uuid"]);
    assert!(
        a.iter().all(|x| x["rule"] == "gpu_idle"),
        "no other alert on the healthy slices or the parent: {alerts}"
    );
    // The usage ledger: each instance is a GPU of its own; the idle slice held idle.
    let (ok, u) = gpuwatch(&["usage", "--db", db, "--by", "gpu", "--format", "json"]);
    assert!(ok, "{u}");
    let u: Value = serde_json::from_str(&u).expect("json");
    let rows = u["rows"].as_array().expect("rows");
    assert_eq!(
        rows.len(),
        7,
        "7 instances (the parent is accounted through them): {u:#}"
    );
    assert!(
        rows[0]["key"]
            .as_str()
            .is_some_and(|k| k.ends_with(":0/11")),
        "{u:#}"
    );
    assert!(rows[0]["idle_held_hours"].as_f64().unwrap() > 0.4, "{u:#}");
    assert!(
        rows[1..].iter().all(|r| r["idle_held_hours"] == 0.0),
        "the working slices: {u:#}"
    );
    // `--gpu 0/11` is the slice; `--gpu 0` the whole GPU.
    let (ok, h) = gpuwatch(&[
        "history", "--db", db, "--gpu", "0/11", "--metric", "mem", "--format", "json",
    ]);
    assert!(ok, "{h}");
    let h: Value = serde_json::from_str(&h).expect("json");
    let series = h["series"].as_array().expect("series");
    assert_eq!(series.len(), 1);
    assert_eq!(series[0]["gpu_uuid"], instances[4]["uuid"]);
    assert_eq!(series[0]["gpu_index"], "0/11");
    let (ok, h) = gpuwatch(&[
        "history", "--db", db, "--gpu", "0", "--metric", "mem", "--format", "json",
    ]);
    assert!(ok);
    let h: Value = serde_json::from_str(&h).expect("json");
    assert_eq!(
        h["series"][0]["gpu_uuid"], parent["uuid"],
        "0 is the whole GPU"
    );
    assert_eq!(h["series"].as_array().map(Vec::len), Some(1));
}

#[test]
fn metrics_carry_dcgm_exporters_mig_labels() {
    let dir = tempfile::tempdir().expect("tmp");
    let port = http_support::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args([
            "demo",
            "--scenario",
            &scenario(),
            "--duration",
            "20m",
            "--every",
            "1h",
        ])
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--db")
        .arg(dir.path().join("demo.db"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("demo");
    let _demo = http_support::Daemon(child);
    let scrape = wait_for("seven instances scraped", Duration::from_secs(60), || {
        let (code, _, body) = http_support::http_get(port, "/metrics", None, &[]);
        let n = body
            .lines()
            .filter(|l| l.starts_with("DCGM_FI_DEV_FB_USED{") && l.contains("GPU_I_ID="))
            .count();
        (code == 200 && n == 7 && body.contains("DCGM_FI_PROF_SM_ACTIVE{")).then_some(body)
    });
    let parent = scrape
        .lines()
        .find(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP{"))
        .expect("the parent's temperature");
    let uuid = parent
        .split("UUID=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("UUID");
    for gi in 7..=13 {
        let gi = gi.to_string();
        let want = [
            ("gpu", "0"),
            ("UUID", uuid),
            ("GPU_I_ID", gi.as_str()),
            ("GPU_I_PROFILE", "1g.10gb"),
            ("modelName", "NVIDIA H100 80GB HBM3"),
        ];
        assert!(
            series_value(&scrape, "DCGM_FI_DEV_FB_USED", &want).is_some(),
            "instance {gi}: {scrape}"
        );
    }
    assert!(
        !scrape
            .lines()
            .any(|l| l.starts_with("DCGM_FI_DEV_GPU_UTIL{") && l.contains("GPU_I_ID")),
        "no utilisation series for an instance"
    );
    assert!(
        !scrape
            .lines()
            .any(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP{") && l.contains("GPU_I_ID")),
        "temperature is the parent's alone"
    );
}
