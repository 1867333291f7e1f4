//! Remote write from a real `gpuwatch run`: into Debian's Prometheus
//! (`--web.enable-remote-write-receiver`) through an outage and a daemon restart with
//! nothing lost; and against a scripted receiver that decodes every request (snappy +
//! protobuf): retries on 503 and 429, a 400 refused for good, order kept, auth sent.

use std::time::Duration;

use prost::Message;
use serde_json::Value;

use crate::http_support;
use crate::http_support::{Node, http_get, url_encode as encode, wait_for};
use crate::training_support;

/// The timestamps (ms) Prometheus holds for `series` over the last `range`.
fn stored_times(prom: &training_support::Prometheus, series: &str, range: &str) -> Vec<i64> {
    let q = format!("{series}[{range}]");
    let (code, _, body) = http_get(
        prom.port,
        &format!("/api/v1/query?query={}", encode(&q)),
        None,
        &[],
    );
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    v["data"]["result"][0]["values"]
        .as_array()
        .map(|vals| {
            vals.iter()
                .filter_map(|p| p[0].as_f64())
                .map(|t| (t * 1000.0).round() as i64)
                .collect()
        })
        .unwrap_or_default()
}

fn remote_status(node: &Node) -> Value {
    let s: Value =
        serde_json::from_str(&node.cli(&["status", "--format", "json"])).expect("status");
    s["remote_write"][0].clone()
}

#[test]
fn an_outage_and_a_restart_lose_nothing() {
    training_support::require_tools();
    let dir = tempfile::tempdir().expect("tmp");
    let mut prom = training_support::Prometheus::start_configured(
        dir.path(),
        &dir.path().join("data"),
        "global:\n  scrape_interval: 1m\nscrape_configs: []\n",
    );
    let rw = format!(
        "[[remote_write]]\nname = \"central\"\nurl = \"{}/api/v1/write\"\ninterval = \"1s\"\ntimeout = \"2s\"\n",
        prom.url()
    );
    let node = Node::new("pusher", 21, "", &rw);
    let mut daemon = node.start(&[]);
    let series = "gpuwatch_gpus{instance=\"pusher\",job=\"gpuwatch\"}";
    wait_for("the first pushed samples", Duration::from_secs(30), || {
        (stored_times(&prom, series, "10m").len() >= 2).then_some(())
    });

    // The receiver goes away; the daemon keeps queueing, then restarts during the outage.
    prom.stop();
    std::thread::sleep(Duration::from_secs(4));
    daemon.sigterm();
    let queued = remote_status(&node);
    assert!(
        queued["pending_requests"].as_i64().unwrap_or(0) >= 3,
        "snapshots queued during the outage: {queued}"
    );
    let mut daemon = node.start(&[]);
    std::thread::sleep(Duration::from_secs(2));
    prom.restart();

    // Everything queued arrives, in order, and the queue drains.
    let st = wait_for("the queue to drain", Duration::from_secs(60), || {
        let st = remote_status(&node);
        (st["pending_requests"] == 0 && st["sent_requests"].as_i64().unwrap_or(0) >= 8)
            .then_some(st)
    });
    daemon.sigterm();
    let st_final = remote_status(&node);
    assert_eq!(st_final["refused_requests"], 0, "{st_final}");
    assert_eq!(st_final["dropped_requests"], 0, "{st_final}");
    assert!(
        st["failed_attempts"].as_i64().unwrap_or(0) >= 1,
        "the outage was seen: {st}"
    );
    let sent = st_final["sent_requests"].as_i64().expect("sent");
    let times = stored_times(&prom, series, "10m");
    assert_eq!(
        times.len() as i64,
        sent,
        "one stored sample per snapshot sent: {times:?}"
    );
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    // The outage is covered: snapshots kept coming every second while Prometheus was away
    // (the only longer gap is the daemon's own restart).
    let long_gaps = times.windows(2).filter(|w| w[1] - w[0] > 1500).count();
    assert!(long_gaps <= 1, "{times:?}");
    // And the dashboard's variables see the pushed node as an instance.
    let (_, _, v) = http_get(
        prom.port,
        &format!(
            "/api/v1/label/instance/values?match[]={}",
            encode("DCGM_FI_DEV_GPU_TEMP")
        ),
        None,
        &[],
    );
    assert!(v.contains("\"pusher\""), "{v}");
}

#[test]
fn retries_5xx_and_429_refuses_4xx_and_keeps_order() {
    use crate::training_support::Canned;
    let recv = training_support::CannedServer::start(vec![
        Canned::Headers(503, ""),
        Canned::Headers(429, "Retry-After: 1\r\n"),
        Canned::Headers(400, ""),
        Canned::Headers(204, ""),
    ]);
    let dir = tempfile::tempdir().expect("tmp");
    let token = dir.path().join("token");
    std::fs::write(&token, "rw-s3cret-token\n").expect("token");
    let rw = format!(
        "[[remote_write]]\nurl = \"{}/api/v1/write\"\ninterval = \"1s\"\ntoken_file = \"{}\"\n[remote_write.labels]\ncluster = \"lab\"\n",
        recv.url,
        token.display()
    );
    let node = Node::new("retrier", 22, "", &rw);
    let _d = node.start(&[]);
    let st = wait_for(
        "a refused and several sent requests",
        Duration::from_secs(40),
        || {
            let st = remote_status(&node);
            (st["refused_requests"] == 1 && st["sent_requests"].as_i64().unwrap_or(0) >= 3)
                .then_some(st)
        },
    );
    assert_eq!(st["target"], "remote_write_1", "{st}");
    assert!(st["failed_attempts"].as_i64().unwrap_or(0) >= 2, "{st}");
    assert!(
        st["last_error"].as_str().unwrap_or("").contains("400"),
        "{st}"
    );
    // Each request decoded: snappy block format, then the protobuf WriteRequest.
    let got: Vec<(String, gpuwatch::remote_write::proto::WriteRequest)> = recv
        .received()
        .into_iter()
        .map(|r| {
            let raw = snap::raw::Decoder::new()
                .decompress_vec(&r.body)
                .expect("snappy block format");
            let req = gpuwatch::remote_write::proto::WriteRequest::decode(raw.as_slice())
                .expect("protobuf");
            let head =
                r.text[..r.text.find("\r\n\r\n").unwrap_or(r.text.len())].to_ascii_lowercase();
            (head, req)
        })
        .collect();
    // The first snapshot was tried three times (503, 429, then refused with 400), and the
    // next one only after it: one request in flight, the head first.
    let stamp =
        |r: &gpuwatch::remote_write::proto::WriteRequest| r.timeseries[0].samples[0].timestamp;
    assert_eq!(stamp(&got[0].1), stamp(&got[1].1));
    assert_eq!(stamp(&got[1].1), stamp(&got[2].1));
    assert!(stamp(&got[3].1) > stamp(&got[2].1));
    assert!(
        got.windows(2).all(|w| stamp(&w[0].1) <= stamp(&w[1].1)),
        "in order"
    );
    for (head, req) in &got {
        assert!(
            head.contains("content-encoding: snappy")
                && head.contains("x-prometheus-remote-write-version: 0.1.0"),
            "{head}"
        );
        assert!(
            head.contains("authorization: bearer rw-s3cret-token"),
            "{head}"
        );
        let ts = &req.timeseries;
        assert!(
            ts.iter()
                .all(|t| t.labels.windows(2).all(|w| w[0].name < w[1].name)),
            "labels sorted"
        );
    }
    // The newest request carries the GPUs (the very first snapshot may precede the first tick).
    {
        let ts = &got.last().expect("requests").1.timeseries;
        let temp = ts
            .iter()
            .find(|t| {
                t.labels
                    .iter()
                    .any(|l| l.name == "__name__" && l.value == "DCGM_FI_DEV_GPU_TEMP")
            })
            .expect("the GPU series");
        for (k, v) in [
            ("cluster", "lab"),
            ("job", "gpuwatch"),
            ("instance", "retrier"),
            ("Hostname", "retrier"),
        ] {
            assert!(
                temp.labels.iter().any(|l| l.name == k && l.value == v),
                "{k}={v}: {:?}",
                temp.labels
            );
        }
    }
    assert!(
        !node.log().contains("rw-s3cret-token"),
        "the token is never logged"
    );
    let table = node.cli(&["status"]);
    assert!(
        table.contains("Remote write:")
            && table.contains("remote_write_1: ")
            && table.contains("1 request(s) refused"),
        "{table}"
    );
    assert!(!table.contains("rw-s3cret-token"), "{table}");
    let (_, _, m) = node.get("/metrics", None);
    assert!(
        http_support::series_value(
            &m,
            "gpuwatch_remote_write_refused_samples_total",
            &[("target", "remote_write_1")]
        )
        .is_some_and(|n| n > 0.0),
        "{m}"
    );
}

/// A series to push: its name, labels and how much it rises per second.
type Pushed<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);

/// Pushes `series` (name and labels) into Prometheus's remote-write receiver: one point per
/// second over the last `secs` seconds, the value rising by `slope` per second.
fn push_training(prom: &training_support::Prometheus, series: &[Pushed], secs: i64) {
    use gpuwatch::remote_write::proto;
    let now = chrono::Utc::now().timestamp_millis();
    let mut req = proto::WriteRequest::default();
    for (name, labels, slope) in series {
        let mut l: Vec<proto::Label> = labels
            .iter()
            .map(|(k, v)| proto::Label {
                name: k.to_string(),
                value: v.to_string(),
            })
            .chain([proto::Label {
                name: "__name__".into(),
                value: name.to_string(),
            }])
            .collect();
        l.sort_by(|a, b| a.name.cmp(&b.name));
        let samples = (0..secs)
            .map(|i| proto::Sample {
                value: 1000.0 + slope * i as f64,
                timestamp: now - (secs - i) * 1000,
            })
            .collect();
        req.timeseries
            .push(proto::TimeSeries { labels: l, samples });
    }
    let body = gpuwatch::remote_write::encode(&req);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let status = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("{}/api/v1/write", prom.url()))
            .header("Content-Encoding", "snappy")
            .header("Content-Type", "application/x-protobuf")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
            .body(body)
            .send()
            .await
            .expect("push")
            .status()
    });
    assert!(status.is_success(), "{status}");
}

#[test]
fn metrics_export_the_training_progress_each_gpu_joins() {
    training_support::require_tools();
    let dir = tempfile::tempdir().expect("tmp");
    let prom = training_support::Prometheus::start_configured(
        dir.path(),
        &dir.path().join("data"),
        "global:\n  scrape_interval: 1m\nscrape_configs: []\n",
    );
    // The job on GPU 0 says so with a `gpu` label; a second job's series names its pod.
    push_training(
        &prom,
        &[
            ("training_step", &[("job", "llama"), ("gpu", "0")], 1.0),
            ("training_loss", &[("job", "llama"), ("gpu", "0")], -0.0001),
        ],
        120,
    );
    let node = Node::new(
        "trainer",
        23,
        "",
        &format!(
            "[prometheus]\nurl = \"{}\"\npoll_interval = \"1s\"\nlookback = \"10m\"\n",
            prom.url()
        ),
    );
    let _d = node.start(&[]);
    let m = wait_for("gpuwatch_training_step", Duration::from_secs(40), || {
        let (_, _, m) = node.get("/metrics", None);
        m.contains("gpuwatch_training_step{").then_some(m)
    });
    let step = http_support::series_value(
        &m,
        "gpuwatch_training_step",
        &[("gpu", "0"), ("job", "llama"), ("Hostname", "trainer")],
    )
    .expect("GPU 0's step");
    assert!((1000.0..1200.0).contains(&step), "{step}");
    assert!(
        !m.contains("exported_gpu"),
        "the series' own gpu label is the GPU's: {m}"
    );
    assert!(
        http_support::series_value(
            &m,
            "gpuwatch_training_loss",
            &[("gpu", "0"), ("job", "llama")]
        )
        .is_some(),
        "{m}"
    );
    // GPU 1 runs nothing the series names: no training series for it (unknown, not 0).
    assert!(
        !m.lines()
            .any(|l| l.starts_with("gpuwatch_training_step{gpu=\"1\"")),
        "{m}"
    );
    assert_eq!(
        http_support::series_value(&m, "gpuwatch_training_source_up", &[("role", "step")]),
        Some(1.0),
        "{m}"
    );
}
