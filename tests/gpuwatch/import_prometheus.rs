//! `gpuwatch import prometheus` against a real Prometheus (Debian's), backfilled with promtool
//! from dcgm-exporter-shaped series: two nodes × two GPUs, an hour at 15 s, one GPU with a
//! 3-minute gap, SM activity on one GPU only. The raw samples land exactly (the gap stays a
//! gap: no sample invented), an absent metric stays NULL, a re-run imports nothing twice,
//! and bad input (a selector matching nothing, an unreachable Prometheus) exits non-zero with
//! one clear line.

use std::fmt::Write as _;
use std::process::Command;

use std::process::Stdio;
use std::time::Duration;

use crate::http_support::{http_get, wait_for};
use crate::training_support::{Prometheus, backfill, count, free_port, require_tools};

const STEP_S: i64 = 15;
const POINTS: i64 = 240;

struct Gpu {
    host: &'static str,
    index: u32,
    uuid: &'static str,
}

const GPUS: [Gpu; 4] = [
    Gpu {
        host: "node-a",
        index: 0,
        uuid: "GPU-0a0a0a0a-0000-4000-8000-000000000000",
    },
    Gpu {
        host: "node-a",
        index: 1,
        uuid: "GPU-0a0a0a0a-0000-4000-8000-000000000001",
    },
    Gpu {
        host: "node-b",
        index: 0,
        uuid: "GPU-0b0b0b0b-0000-4000-8000-000000000000",
    },
    Gpu {
        host: "node-b",
        index: 1,
        uuid: "GPU-0b0b0b0b-0000-4000-8000-000000000001",
    },
];

/// node-b GPU 1 has no sample in [t0 + 1200 s, t0 + 1380 s): 12 scrapes missed.
fn in_gap(g: usize, t: i64) -> bool {
    g == 3 && (1200..1380).contains(&t)
}

/// A family's value of GPU `g` at `t` seconds from the start (`None`: not exported).
type Value = fn(usize, i64) -> Option<f64>;

/// The series as text: OpenMetrics with second timestamps (`promtool`'s backfill), or the
/// Prometheus text format with millisecond timestamps (VictoriaMetrics' import).
fn exposition(t0_s: i64, millis: bool) -> String {
    let mut out = String::new();
    let families: [(&str, Value); 5] = [
        ("DCGM_FI_DEV_GPU_UTIL", |g, _| {
            Some(if g == 1 { 0.0 } else { 95.0 })
        }),
        ("DCGM_FI_DEV_FB_USED", |_, _| Some(40960.0)),
        ("DCGM_FI_DEV_GPU_TEMP", |_, t| Some(60.0 + (t % 7) as f64)),
        ("DCGM_FI_DEV_POWER_USAGE", |_, _| Some(512.5)),
        ("DCGM_FI_PROF_SM_ACTIVE", |g, _| (g == 0).then_some(0.8)),
    ];
    for (name, value) in families {
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (g, gpu) in GPUS.iter().enumerate() {
            for i in 0..POINTS {
                let t = i * STEP_S;
                let Some(v) = value(g, t) else { continue };
                if in_gap(g, t) {
                    continue;
                }
                let _ = writeln!(
                    out,
                    "{name}{{gpu=\"{}\",UUID=\"{}\",device=\"nvidia{}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"{}\"}} {v} {}",
                    gpu.index,
                    gpu.uuid,
                    gpu.index,
                    gpu.host,
                    if millis { (t0_s + t) * 1000 } else { t0_s + t }
                );
            }
        }
    }
    if !millis {
        out.push_str("# EOF\n");
    }
    out
}

fn import(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .env_remove("RUST_LOG")
        .arg("import")
        .arg("prometheus")
        .args(args)
        .output()
        .expect("gpuwatch");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn raw_samples_land_exactly_gaps_stay_gaps_and_a_rerun_adds_nothing() {
    require_tools();
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("tsdb");
    std::fs::create_dir(&data).expect("mkdir");
    let t0_s = (chrono::Utc::now().timestamp() - 3 * 3600) / 3600 * 3600;
    backfill(dir.path(), "dcgm.om", &exposition(t0_s, false), &data);
    let prom = Prometheus::start(dir.path(), &data);
    let db = dir.path().join("imported.db");
    let db = db.to_str().expect("utf-8");
    let (from, to) = (t0_s.to_string(), (t0_s + POINTS * STEP_S).to_string());
    let url = prom.url();
    let args = [
        "--prometheus",
        &url,
        "--from",
        &from,
        "--to",
        &to,
        "--chunk",
        "15m",
        "--db",
        db,
    ];
    let (code, out, err) = import(&args);
    assert_eq!(code, 0, "{out}{err}");
    let want = 4 * POINTS - 12;
    assert!(
        out.starts_with(&format!(
            "imported {want} samples of 4 GPUs on 2 host(s) (node-a, node-b)"
        )),
        "{out}"
    );
    assert!(out.contains("in 4 chunk(s)"), "{out}");
    let conn = rusqlite::Connection::open(db).expect("db");
    assert_eq!(count(&conn, "SELECT count(*) FROM gpu_samples"), want);
    // The gap stays a gap: 12 scrapes missing, the longest step 13 × 15 s.
    let gap_gpu = GPUS[3].uuid;
    assert_eq!(
        count(
            &conn,
            &format!("SELECT count(*) FROM gpu_samples WHERE gpu_uuid = '{gap_gpu}'")
        ),
        POINTS - 12
    );
    assert_eq!(
        count(
            &conn,
            &format!(
                "SELECT max(d) FROM (SELECT ts_ms - lag(ts_ms) OVER (ORDER BY ts_ms) AS d
                 FROM gpu_samples WHERE gpu_uuid = '{gap_gpu}')"
            )
        ),
        13 * STEP_S * 1000
    );
    // Absent is unknown: SM activity only where it was scraped.
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM gpu_samples WHERE sm_active_pct IS NOT NULL"
        ),
        POINTS
    );
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM gpu_samples WHERE sm_active_pct = 80.0"
        ),
        POINTS
    );
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM gpu_samples WHERE util_gpu_pct = 0 AND mem_used_mib = 40960 AND power_w = 512.5"
        ),
        POINTS,
        "units: MiB and W as dcgm-exporter exports them"
    );
    assert_eq!(
        count(&conn, "SELECT count(DISTINCT host) FROM gpu_inventory"),
        2
    );
    // The minutes rolled up while staging equal the samples' own: every GPU-minute, its
    // count and extremes.
    let minutes = count(
        &conn,
        "SELECT count(*) FROM (SELECT gpu_id, ts_ms / 60000 FROM samples GROUP BY 1, 2)",
    );
    assert_eq!(count(&conn, "SELECT count(*) FROM rollups_1m"), minutes);
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM rollups_1m r JOIN (
               SELECT gpu_id, ts_ms / 60000 * 60000 AS m, count(*) AS n, max(temp_c) AS t,
                      min(util_gpu_pct) AS u FROM samples GROUP BY 1, 2) s
               ON s.gpu_id = r.gpu_id AND s.m = r.ts_ms
             WHERE r.n = s.n AND r.temp_max = s.t AND r.util_gpu_min = s.u"
        ),
        minutes
    );
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM gpu_inventory WHERE gpu_name = 'NVIDIA H100 80GB HBM3'"
        ),
        4
    );
    drop(conn);

    // What gpuwatch would have said: node-a's GPU 1 held 40 GiB at 0 % for the hour.
    let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .env_remove("RUST_LOG")
        .args(["replay", "--db", db, "--format", "jsonl"])
        .output()
        .expect("replay");
    let replay = String::from_utf8_lossy(&o.stdout);
    let fired: Vec<serde_json::Value> = replay
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["state"] == "firing")
        .collect();
    assert!(
        fired
            .iter()
            .any(|v| v["rule"] == "gpu_idle" && v["host"] == "node-a" && v["uuid"] == GPUS[1].uuid),
        "{replay}"
    );
    assert!(
        fired.iter().all(|v| v["uuid"] == GPUS[1].uuid),
        "only the idle GPU: {replay}"
    );

    // A re-run: every chunk already imported, nothing written twice.
    let (code, out, err) = import(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("imported 0 samples"), "{out}");
    assert!(
        out.contains("4 chunk(s) already imported by an earlier run"),
        "{out}"
    );
    let conn = rusqlite::Connection::open(db).expect("db");
    assert_eq!(count(&conn, "SELECT count(*) FROM gpu_samples"), want);
    drop(conn);

    // A selector that matches nothing: non-zero, one clear line, nothing written.
    let other = dir.path().join("other.db");
    let other = other.to_str().expect("utf-8");
    let (code, out, err) = import(&[
        "--prometheus",
        &url,
        "--from",
        &from,
        "--to",
        &to,
        "--selector",
        "Hostname=\"node-z\"",
        "--db",
        other,
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("no dcgm-exporter sample in the range matching Hostname=\"node-z\""),
        "{err}"
    );

    // An unreachable Prometheus: non-zero, the URL named.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let (code, out, err) = import(&[
        "--prometheus",
        &dead,
        "--from",
        &from,
        "--to",
        &to,
        "--db",
        other,
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("127.0.0.1"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// The same series in VictoriaMetrics (Debian's), imported through its own API: its instant
/// query of a range selector answers raw samples too, and VictoriaMetrics keeps no stale
/// markers, so a `query_range` would fill the gap; the import must not.
#[test]
fn victoria_metrics_answers_the_same_raw_samples() {
    let dir = tempfile::tempdir().expect("tmp");
    let (_vm, port) = victoria_metrics(dir.path());
    let t0_s = (chrono::Utc::now().timestamp() - 3 * 3600) / 3600 * 3600;
    vm_import(port, &exposition(t0_s, true));
    let want = 4 * POINTS - 12;
    let url = format!("http://127.0.0.1:{port}");
    let db = dir.path().join("vm.db");
    let db = db.to_str().expect("utf-8");
    let (from, to) = (t0_s.to_string(), (t0_s + POINTS * STEP_S).to_string());
    // Ingested rows become searchable within a second or two.
    let out = wait_for(
        "the rows searchable and imported",
        Duration::from_secs(30),
        || {
            let _ = std::fs::remove_file(db);
            let (code, out, _) = import(&[
                "--prometheus",
                &url,
                "--from",
                &from,
                "--to",
                &to,
                "--chunk",
                "20m",
                "--db",
                db,
            ]);
            (code == 0 && out.starts_with(&format!("imported {want} samples"))).then_some(out)
        },
    );
    assert!(out.contains("of 4 GPUs on 2 host(s)"), "{out}");
    let conn = rusqlite::Connection::open(db).expect("db");
    assert_eq!(count(&conn, "SELECT count(*) FROM gpu_samples"), want);
    let gap_gpu = GPUS[3].uuid;
    assert_eq!(
        count(
            &conn,
            &format!(
                "SELECT max(d) FROM (SELECT ts_ms - lag(ts_ms) OVER (ORDER BY ts_ms) AS d
                 FROM gpu_samples WHERE gpu_uuid = '{gap_gpu}')"
            )
        ),
        13 * STEP_S * 1000,
        "the gap stays a gap"
    );
}

/// Starts Debian's VictoriaMetrics on a free loopback port over a store in `dir`.
pub fn victoria_metrics(dir: &std::path::Path) -> (crate::http_support::Daemon, u16) {
    let port = free_port();
    let log = std::fs::File::create(dir.join("vm.log")).expect("log");
    let child = Command::new("victoria-metrics")
        .arg(format!("-storageDataPath={}", dir.join("vm").display()))
        .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
        .arg("-search.latencyOffset=0s")
        .arg("-search.disableCache")
        .arg("-retentionPeriod=100y")
        .arg("-maxInsertRequestSize=512000000")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("victoria-metrics (scripts/test.sh installs Debian's victoria-metrics)");
    let vm = crate::http_support::Daemon(child);
    wait_for("VictoriaMetrics up", Duration::from_secs(30), || {
        (http_get(port, "/health", None, &[]).0 == 200).then_some(())
    });
    (vm, port)
}

/// POSTs Prometheus text (millisecond timestamps) to VictoriaMetrics' import API, then
/// flushes it (a plain HTTP/1.1 request, Connection: close).
pub fn vm_import(port: u16, body: &str) {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        s,
        "POST /api/v1/import/prometheus HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .expect("post");
    s.write_all(body.as_bytes()).expect("post body");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("answer");
    assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");
    let _ = http_get(port, "/internal/force_flush", None, &[]);
}
