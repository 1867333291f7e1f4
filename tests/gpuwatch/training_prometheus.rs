//! Training metrics against a real Prometheus (Debian's `prometheus` package): series are
//! backfilled with `promtool tsdb create-blocks-from openmetrics`, fetched through
//! [`TrainingFetcher`] and checked point by point and label by label; then Prometheus is
//! stopped mid-run (the failure is recorded in `training_source`) and restarted on the same
//! data (the fetcher recovers). Then the same over HTTPS: a test CA from the openssl CLI, the
//! `ca_file` and `insecure_skip_verify` keys, and an untrusted certificate refused.

use std::collections::BTreeSet;
use std::time::Duration;

use gpuwatch::model::TrainingPoint;
use gpuwatch::store::{self, WriterHandle, read};
use gpuwatch::training::{GpuRef, Join, Role, TrainingFetcher, gpus_for_series};

use crate::training_support::{
    HOST, Prometheus, backfill, config, count, make_certs, open_store, require_tools,
};

const STEP_S: i64 = 15;
const SAMPLES: i64 = 41; // 10 minutes at 15 s
const UUID0: &str = "GPU-00000000-aaaa-bbbb-cccc-000000000000";
const UUID1: &str = "GPU-00000001-aaaa-bbbb-cccc-000000000001";

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    v.sort();
    v
}

/// The series written to Prometheus: (family, sample name, labels, value at sample k).
type Gen = (&'static str, Vec<(String, String)>, fn(i64) -> f64);

fn gauges() -> Vec<Gen> {
    vec![
        (
            "training_step",
            labels(&[("job", "train"), ("gpu", "0")]),
            |k| (100 + k) as f64,
        ),
        (
            "training_step",
            labels(&[("job", "train"), ("gpu", "1")]),
            |k| (100 + k) as f64,
        ),
        (
            "training_step",
            labels(&[("job", "train"), ("rank", "0")]),
            |k| (2 * k) as f64,
        ),
        (
            "training_loss",
            labels(&[("job", "train"), ("uuid", UUID0)]),
            |k| match k {
                5 => f64::NAN,
                6 => f64::INFINITY,
                7 => f64::NEG_INFINITY,
                _ => 1.0 / (k + 1) as f64,
            },
        ),
        (
            "training_loss",
            labels(&[("job", "train"), ("gpu", "0")]),
            |k| 2.5 - k as f64 * 0.01,
        ),
    ]
}

/// dcgm-style `UUID` (upper case, no `GPU-` prefix) on an OpenMetrics counter: `_total`.
fn counters() -> Vec<Gen> {
    let uuid = UUID1.trim_start_matches("GPU-").to_uppercase();
    let uuid: &'static str = Box::leak(uuid.into_boxed_str());
    vec![(
        "training_step",
        labels(&[("job", "other"), ("UUID", uuid)]),
        |k| (10 * k) as f64,
    )]
}

fn openmetrics(series: &[Gen], kind: &str, t0_s: i64) -> String {
    let mut out = String::new();
    let mut family = "";
    for (name, labels, value) in series {
        if *name != family {
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            family = name;
        }
        let sample = if kind == "counter" {
            format!("{name}_total")
        } else {
            name.to_string()
        };
        let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        for k in 0..SAMPLES {
            let v = value(k);
            let v = if v.is_nan() {
                "NaN".to_string()
            } else if v.is_infinite() {
                if v > 0.0 {
                    "+Inf".into()
                } else {
                    "-Inf".into()
                }
            } else {
                v.to_string()
            };
            out.push_str(&format!(
                "{sample}{{{}}} {v} {}\n",
                l.join(","),
                t0_s + k * STEP_S
            ));
        }
    }
    out.push_str("# EOF\n");
    out
}

/// The points the fetcher must return: finite values, canonical names, labels sorted.
fn expected(t0_s: i64) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (name, labels, value) in gauges().into_iter().chain(counters()) {
        for k in 0..SAMPLES {
            let v = value(k);
            if v.is_finite() {
                out.insert(key(&TrainingPoint {
                    ts_ms: (t0_s + k * STEP_S) * 1000,
                    name: name.to_string(),
                    labels: labels.clone(),
                    value: v,
                }));
            }
        }
    }
    out
}

fn key(p: &TrainingPoint) -> String {
    format!("{} {} {:?} {}", p.ts_ms, p.name, p.labels, p.value)
}

#[tokio::test(flavor = "current_thread")]
async fn fetches_backfilled_series_and_survives_an_outage() {
    require_tools();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("tsdb");
    std::fs::create_dir(&data).expect("mkdir");
    // A past, minute-aligned range: a multiple of the step, well inside the default retention.
    let now_s = chrono::Utc::now().timestamp();
    let t0_s = (now_s - 3600) / 60 * 60;
    backfill(
        dir.path(),
        "gauges.om",
        &openmetrics(&gauges(), "gauge", t0_s),
        &data,
    );
    backfill(
        dir.path(),
        "counters.om",
        &openmetrics(&counters(), "counter", t0_s),
        &data,
    );
    let mut prom = Prometheus::start(dir.path(), &data);

    let mut fetcher = TrainingFetcher::new(&config(&prom.url()), HOST).expect("fetcher");
    let (t0, t_end) = (t0_s * 1000, (t0_s + (SAMPLES - 1) * STEP_S) * 1000);

    // 1. An explicit range: exactly the generated finite points, labels without __name__.
    let points = fetcher.fetch_range(t0, t_end).await.expect("fetch");
    let got: BTreeSet<String> = points.iter().map(key).collect();
    assert_eq!(got.len(), points.len(), "no duplicate points");
    assert_eq!(got, expected(t0_s));
    let loss = fetcher
        .fetch_role(Role::Loss, t0, t_end)
        .await
        .expect("loss");
    assert_eq!((loss.series, loss.skipped_non_finite), (2, 3));

    // 2. The join of every fetched series onto this host's GPUs.
    let gpus = [
        GpuRef {
            index: 0,
            uuid: UUID0.into(),
            pod: None,
        },
        GpuRef {
            index: 1,
            uuid: UUID1.into(),
            pod: None,
        },
    ];
    let joins: BTreeSet<(String, String)> = points
        .iter()
        .map(|p| {
            (
                format!("{}{:?}", p.name, p.labels),
                format!("{:?}", gpus_for_series(&p.labels, &gpus)),
            )
        })
        .collect();
    let join_of = |name: &str, l: &[(&str, &str)]| {
        let k = format!("{name}{:?}", labels(l));
        joins
            .iter()
            .find(|(s, _)| *s == k)
            .map(|(_, j)| j.clone())
            .expect("series fetched")
    };
    assert_eq!(
        join_of("training_step", &[("gpu", "1"), ("job", "train")]),
        format!("{:?}", Join::Gpus(vec![1]))
    );
    assert_eq!(
        join_of("training_step", &[("job", "train"), ("rank", "0")]),
        format!("{:?}", Join::All)
    );
    assert_eq!(
        join_of("training_loss", &[("job", "train"), ("uuid", UUID0)]),
        format!("{:?}", Join::Gpus(vec![0]))
    );
    let upper = UUID1.trim_start_matches("GPU-").to_uppercase();
    assert_eq!(
        join_of("training_step", &[("UUID", &upper), ("job", "other")]),
        format!("{:?}", Join::Gpus(vec![1]))
    );

    // 3. Polling through the store writer: points and a success status per role.
    let writer = WriterHandle::spawn(open_store(dir.path())).expect("writer");
    let sender = writer.training_sender().expect("sender");
    sender.send(fetcher.poll(t_end).await).expect("queued");
    writer.flush().expect("flush");
    let ro = store::open_read_only(&dir.path().join("g.db")).expect("ro");
    let n = expected(t0_s).len() as i64;
    assert_eq!(count(&ro, "SELECT count(*) FROM training_points"), n);
    assert_eq!(count(&ro, "SELECT count(*) FROM training_series"), 6);
    let status = read::training_sources(&ro, Some(HOST)).expect("status");
    assert_eq!(status.len(), 2);
    for s in &status {
        assert_eq!(
            (s.last_success_ms, s.consecutive_failures, s.last_error_ms),
            (Some(t_end), 0, None),
            "{s:?}"
        );
        assert_eq!(s.last_nonempty_ms, Some(t_end));
        assert_eq!(s.last_point_ms, Some(t_end));
    }
    let loss_status = status.iter().find(|s| s.role == "loss").expect("loss row");
    assert_eq!(
        (loss_status.last_series, loss_status.skipped_non_finite),
        (Some(2), 3)
    );

    // 4. Prometheus stops mid-run: each poll records a failure, nothing else changes.
    prom.stop();
    for (i, at) in [t_end + 15_000, t_end + 30_000].into_iter().enumerate() {
        let w = fetcher.poll(at).await;
        assert!(w.points.is_empty());
        sender.send(w).expect("queued");
        writer.flush().expect("flush");
        for s in read::training_sources(&ro, Some(HOST)).expect("status") {
            assert_eq!(s.last_error_kind.as_deref(), Some("unreachable"), "{s:?}");
            assert_eq!(
                (s.last_error_ms, s.consecutive_failures),
                (Some(at), i as u64 + 1)
            );
            assert_eq!(
                s.last_success_ms,
                Some(t_end),
                "an outage keeps the last success"
            );
            assert_eq!(
                s.last_nonempty_ms,
                Some(t_end),
                "the host had training metrics"
            );
        }
    }
    assert_eq!(count(&ro, "SELECT count(*) FROM training_points"), n);

    // 5. Back on the same data: the poll resumes from the cursor (minus the overlap).
    prom.restart();
    let at = t_end + 45_000;
    let w = retry_poll(&mut fetcher, at).await;
    sender.send(w).expect("queued");
    writer.flush().expect("flush");
    for s in read::training_sources(&ro, Some(HOST)).expect("status") {
        assert_eq!(
            (s.last_success_ms, s.consecutive_failures),
            (Some(at), 0),
            "{s:?}"
        );
        assert_eq!(
            s.last_error_kind.as_deref(),
            Some("unreachable"),
            "the last error is kept"
        );
    }
    // The overlap re-fetched [t_end - 60 s, t_end] (replaced, not duplicated); the grid points
    // t_end + 15/30/45 s are new: Prometheus carries each series' last sample forward for its
    // 5-minute lookback, so 3 new points for each of the 6 series.
    assert_eq!(count(&ro, "SELECT count(*) FROM training_points"), n + 18);
    writer.shutdown();
}

#[tokio::test(flavor = "current_thread")]
async fn https_with_a_ca_file_and_insecure_skip_verify() {
    require_tools();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("tsdb");
    std::fs::create_dir(&data).expect("mkdir");
    let t0_s = (chrono::Utc::now().timestamp() - 3600) / 60 * 60;
    backfill(
        dir.path(),
        "g.om",
        &openmetrics(&gauges(), "gauge", t0_s),
        &data,
    );
    let (ca, cert, key) = make_certs(dir.path());
    let _prom = Prometheus::start_tls(dir.path(), &data, &cert, &key);
    let url = _prom.url();
    assert!(url.starts_with("https://"));
    let (t0, t_end) = (t0_s * 1000, (t0_s + (SAMPLES - 1) * STEP_S) * 1000);

    // Trusting the test CA: the step series come back over TLS.
    let mut cfg = config(&url);
    cfg.ca_file = Some(ca.clone());
    let f = TrainingFetcher::new(&cfg, HOST).expect("fetcher");
    let mut last = None;
    for _ in 0..100 {
        match f.fetch_role(Role::Step, t0, t_end).await {
            Ok(r) => {
                last = Some(Ok(r));
                break;
            }
            Err(e) => last = Some(Err(e)),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let step = last
        .expect("tried")
        .expect("fetch over TLS with the CA file");
    assert_eq!((step.series, step.points.len()), (3, 3 * SAMPLES as usize));

    // Without the CA the certificate is refused, and nothing else is said about the server.
    let f = TrainingFetcher::new(&config(&url), HOST).expect("fetcher");
    let e = f
        .fetch_role(Role::Step, t0, t_end)
        .await
        .expect_err("untrusted");
    assert_eq!(e.kind(), "unreachable", "{e}");
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");

    // insecure_skip_verify accepts it (dangerous; documented as such).
    let mut cfg = config(&url);
    cfg.insecure_skip_verify = true;
    let f = TrainingFetcher::new(&cfg, HOST).expect("fetcher");
    let step = f
        .fetch_role(Role::Step, t0, t_end)
        .await
        .expect("insecure fetch");
    assert_eq!(step.series, 3);

    // A CA file that is not PEM is a setup error at construction.
    std::fs::write(&ca, "not a certificate").expect("write");
    let mut cfg = config(&url);
    cfg.ca_file = Some(ca);
    let e = TrainingFetcher::new(&cfg, HOST).expect_err("bad CA");
    assert_eq!(e.kind(), "setup", "{e}");
}

/// Polls until both roles succeed (Prometheus may still be loading right after `/-/ready`).
async fn retry_poll(f: &mut TrainingFetcher, at: i64) -> gpuwatch::model::TrainingWrite {
    for _ in 0..50 {
        let w = f.poll(at).await;
        if w.sources.iter().all(|s| s.error.is_none()) {
            return w;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the fetcher did not recover after the restart");
}
