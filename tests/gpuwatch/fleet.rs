//! The fleet, all real and on loopback: three `gpuwatch run` nodes on simulated GPUs,
//! Debian's Prometheus scraping two of them and receiving the third's remote write, Debian's
//! Alertmanager receiving their alerts. NVIDIA's
//! Grafana dashboard for dcgm-exporter (../shared/data/dcgm-exporter) must find every host
//! through its own queries; fleet PromQL over gpuwatch's series must give the right answer;
//! Alertmanager must send one grouped notification.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use crate::http_support::{Node, http_get, url_encode as encode, wait_for};
use crate::notify_support::alertmanager;
use crate::training_support;

const HOSTS: [&str; 3] = ["gpu-a", "gpu-b", "gpu-c"];

/// An instant query's result vector.
fn query(prom: &training_support::Prometheus, q: &str) -> Vec<Value> {
    let (code, _, body) = http_get(
        prom.port,
        &format!("/api/v1/query?query={}", encode(q)),
        None,
        &[],
    );
    assert_eq!(code, 200, "{q}: {body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

fn hosts_of(result: &[Value]) -> BTreeSet<String> {
    result
        .iter()
        .filter_map(|s| s["metric"]["Hostname"].as_str().map(str::to_string))
        .collect()
}

/// Every panel query of NVIDIA's dashboard, with Grafana's "All" for `$instance` and `$gpu`.
fn dashboard_queries() -> Vec<(String, String)> {
    dashboard_queries_of(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/dcgm-exporter/dcgm-exporter-dashboard.json"
    ))
}

/// Every panel query of a dashboard file, `$instance` and `$gpu` as Grafana's "All".
fn dashboard_queries_of(path: &str) -> Vec<(String, String)> {
    let d: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the dashboard")).expect("json");
    let mut out = Vec::new();
    fn walk(panels: &[Value], out: &mut Vec<(String, String)>) {
        for p in panels {
            if let Some(inner) = p["panels"].as_array() {
                walk(inner, out);
            }
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    let e = e
                        .replace("$instance", ".+")
                        .replace("$gpu", ".+")
                        .replace("$__range", "1h");
                    out.push((p["title"].as_str().unwrap_or("?").to_string(), e));
                }
            }
        }
    }
    walk(d["panels"].as_array().expect("panels"), &mut out);
    assert!(out.len() >= 8, "{out:?}");
    out
}

#[test]
fn prometheus_grafana_and_alertmanager_see_the_fleet_unchanged() {
    training_support::require_tools();
    let am = alertmanager::Alertmanager::start();
    let notify = format!(
        "[[notify.alertmanager]]\nname = \"fleet\"\nurls = [\"{}\"]\nresend_every = \"2s\"\n",
        am.url()
    );
    // gpu-a and gpu-b are scraped; gpu-c pushes (remote write), as a node behind a NAT would.
    let scraped: Vec<Node> = HOSTS[..2]
        .iter()
        .enumerate()
        .map(|(i, h)| Node::new(h, 10 + i as u32, "", &notify))
        .collect();
    let dir = tempfile::tempdir().expect("tmp");
    let targets: Vec<String> = scraped
        .iter()
        .map(|n| format!("\"127.0.0.1:{}\"", n.port))
        .collect();
    let prom = training_support::Prometheus::start_configured(
        dir.path(),
        &dir.path().join("data"),
        &format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: gpuwatch\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    );
    let pusher = Node::new(
        HOSTS[2],
        12,
        "",
        &format!(
            "{notify}\n[[remote_write]]\nurl = \"{}/api/v1/write\"\ninterval = \"1s\"\n",
            prom.url()
        ),
    );
    let nodes: Vec<&Node> = scraped.iter().chain([&pusher]).collect();
    let _daemons: Vec<_> = nodes.iter().map(|n| n.start(&[])).collect();

    // Every host's GPUs arrive, through Prometheus's own scrape (OpenMetrics negotiated).
    wait_for("6 GPUs in Prometheus", Duration::from_secs(60), || {
        (query(&prom, "DCGM_FI_DEV_GPU_TEMP").len() == 6
            && query(&prom, "gpuwatch_alert{state=\"firing\"}").len() == 6)
            .then_some(())
    });
    let up = query(&prom, "up{job=\"gpuwatch\"} == 1");
    assert_eq!(up.len(), 2, "two nodes are scraped: {up:?}");
    let pushed = query(
        &prom,
        "DCGM_FI_DEV_GPU_TEMP{job=\"gpuwatch\",instance=\"gpu-c\"}",
    );
    assert_eq!(pushed.len(), 2, "the third pushes its GPUs: {pushed:?}");

    // The dashboard's variables and panels, unchanged.
    let (_, _, v) = http_get(
        prom.port,
        &format!(
            "/api/v1/label/instance/values?match[]={}",
            encode("DCGM_FI_DEV_GPU_TEMP")
        ),
        None,
        &[],
    );
    let v: Value = serde_json::from_str(&v).expect("json");
    assert_eq!(
        v["data"].as_array().map(Vec::len),
        Some(3),
        "$instance: {v}"
    );
    let (_, _, v) = http_get(
        prom.port,
        &format!(
            "/api/v1/label/gpu/values?match[]={}",
            encode("DCGM_FI_DEV_GPU_TEMP")
        ),
        None,
        &[],
    );
    let v: Value = serde_json::from_str(&v).expect("json");
    assert_eq!(v["data"], serde_json::json!(["0", "1"]), "$gpu: {v}");
    let all: BTreeSet<String> = HOSTS.iter().map(|h| h.to_string()).collect();
    let mut titles = Vec::new();
    for (title, q) in dashboard_queries() {
        let r = query(&prom, &q);
        titles.push(title.clone());
        assert!(!r.is_empty(), "panel {title:?} ({q}) has no data");
        let aggregated = q.starts_with("avg(") || q.starts_with("sum(");
        if aggregated {
            assert_eq!(r.len(), 1, "{title}: {r:?}");
        } else {
            assert_eq!(hosts_of(&r), all, "panel {title:?} ({q})");
            // GPU 1 of each node cannot read its power: absent, not 0.
            let expected = if q.contains("POWER_USAGE") { 3 } else { 6 };
            assert_eq!(r.len(), expected, "{title}: {r:?}");
        }
    }
    // Every panel, the profiling one included: the H100s' tensor activity is read through
    // NVML's GPM, as DCGM's profiling module reads it.
    assert!(
        titles.iter().any(|t| t == "Tensor Core Utilization"),
        "{titles:?}"
    );
    let power = query(&prom, "sum(DCGM_FI_DEV_POWER_USAGE)");
    let watts: f64 = power[0]["value"][1]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("watts");
    assert!(
        watts > 3.0 * 50.0,
        "GPU 1 of each host has no power reading, GPU 0 draws: {watts}"
    );

    // gpuwatch's own dashboard (examples/grafana): every query is valid PromQL, and every
    // panel has data but training progress (no training job runs here), the age of the
    // oldest waiting notification (none waits: absent, not 0) and GPU usage (no holder
    // named; tests/gpuwatch/usage.rs sums those counters in Prometheus).
    let ours = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/grafana/gpuwatch-dashboard.json"
    );
    for (title, q) in dashboard_queries_of(ours) {
        let (code, _, body) = http_get(
            prom.port,
            &format!("/api/v1/query?query={}", encode(&q)),
            None,
            &[],
        );
        assert_eq!(code, 200, "panel {title:?}: {q}: {body}");
        // The usage panels need a named holder: these nodes' one process is a pid of the
        // simulated library that /proc does not know (holder unknown, no usage counters).
        let usage = title.contains("held");
        if !title.starts_with("Training") && title != "Oldest waiting notification" && !usage {
            assert!(
                !query(&prom, &q).is_empty(),
                "panel {title:?} ({q}) has no data"
            );
        }
    }

    // Fleet PromQL: the idle GPU of every host, and the alerts by severity.
    let idle = query(&prom, "count by (Hostname) (DCGM_FI_DEV_GPU_UTIL < 5)");
    assert_eq!(hosts_of(&idle), all, "{idle:?}");
    assert!(idle.iter().all(|s| s["value"][1] == "1"), "{idle:?}");
    let by_sev = query(
        &prom,
        "sum by (severity) (gpuwatch_alert{state=\"firing\"})",
    );
    let counts: BTreeSet<(String, String)> = by_sev
        .iter()
        .map(|s| {
            (
                s["metric"]["severity"].as_str().unwrap_or("").to_string(),
                s["value"][1].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        counts,
        [
            ("critical".to_string(), "3".to_string()),
            ("warning".to_string(), "3".to_string())
        ]
        .into(),
        "{by_sev:?}"
    );
    let hot_hosts = query(
        &prom,
        "count by (Hostname) (gpuwatch_alert{alertname=\"hot\"} * on (UUID) group_left DCGM_FI_DEV_GPU_TEMP > 0)",
    );
    assert_eq!(
        hosts_of(&hot_hosts),
        all,
        "alerts join the GPU series by UUID: {hot_hosts:?}"
    );

    // Alertmanager groups the three hosts' `hot` alerts into one notification.
    let grouped = am.wait_for_notification(Duration::from_secs(40), |n| {
        let alerts = n["alerts"].as_array().cloned().unwrap_or_default();
        let hosts: BTreeSet<&str> = alerts
            .iter()
            .filter_map(|a| a["labels"]["host"].as_str())
            .collect();
        n["groupLabels"]["alertname"] == "hot" && hosts.len() == 3
    });
    assert_eq!(
        grouped["alerts"].as_array().map(Vec::len),
        Some(3),
        "{grouped}"
    );
}
