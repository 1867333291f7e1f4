//! `gpuwatch import prometheus` of a day of a small fleet, then `replay`: what gpuwatch
//! would have said. A real Prometheus backfilled with promtool with dcgm-exporter-shaped
//! series (names and labels as in ../shared/data/dcgm-exporter: `gpu`, `UUID`, `device`,
//! `modelName`, `Hostname`, and `pod`/`namespace`/`container` on allocated GPUs) for 3 nodes
//! × 8 H100s at 30 s, and the job's step and loss series with its pods' labels:
//!
//! - node-1 and node-2 run the two pods of job `llm`; its step stops at 18:00 with the
//!   GPUs pinned at 100 % and power collapsed (a stuck collective): a hang on both nodes;
//! - node-2 GPU 3 misses 3 minutes of scrapes at 05:00: the gap stays a gap;
//! - node-3 GPU 6 is held by pod `notebook-0` at 0 % from 02:00 to 10:00: idle-held;
//! - node-3 GPU 7's memory grows 40 MiB/min from 12:00 to 20:00: a leak;
//! - node-1 GPU 2's uncorrected-ECC counter drops from 2 to 0 at 08:00 (a driver reload, no
//!   new error): quiet; node-3 GPU 5's drops to 0 at 14:00 and a new error follows 3 minutes
//!   later: an alert (the counter reset handled).
//!
//! Everything else is busy and healthy, and must stay quiet.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::common::gpuwatch_run as gpuwatch;
use crate::training_support::{Prometheus, backfill, count, require_tools};

const STEP_S: i64 = 30;
const HOURS: i64 = 24;
const N: i64 = HOURS * 3600 / STEP_S;
const H: i64 = 3600;
const MODEL: &str = "NVIDIA H100 80GB HBM3";
/// The hang: job `llm`'s step stops here.
const HANG: i64 = 18 * H;

fn uuid(node: usize, gpu: usize) -> String {
    format!("GPU-{node:08x}-0000-4000-8000-{gpu:012x}")
}

/// Deterministic noise in [0, 1).
fn noise(node: usize, gpu: usize, i: i64, salt: u64) -> f64 {
    let mut x = (node as u64) << 48 ^ (gpu as u64) << 40 ^ (i as u64) << 8 ^ salt;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// One scrape of one GPU: `None` when it was not scraped.
struct Scrape {
    util: f64,
    mem_mib: f64,
    power_w: f64,
    temp: f64,
    ecc_dbe: f64,
    pod: Option<(&'static str, String, &'static str)>,
}

fn scrape(node: usize, gpu: usize, i: i64) -> Option<Scrape> {
    let t = i * STEP_S;
    let r = |salt| noise(node, gpu, i, salt);
    if node == 2 && gpu == 3 && (5 * H..5 * H + 180).contains(&t) {
        return None;
    }
    let busy = |lo: f64| Scrape {
        util: lo + 7.0 * r(1),
        mem_mib: 62_000.0 + 80.0 * r(2),
        power_w: 620.0 + 70.0 * r(3),
        temp: 62.0 + 6.0 * r(4),
        ecc_dbe: 0.0,
        pod: None,
    };
    let free = |r4: f64| Scrape {
        util: 0.0,
        mem_mib: 1.0,
        power_w: 70.0 + 3.0 * r4,
        temp: 33.0,
        ecc_dbe: 0.0,
        pod: None,
    };
    Some(match node {
        1 | 2 => {
            let pod = Some(("ml", format!("llm-{}", node - 1), "trainer"));
            let mut s = busy(92.0);
            if t >= HANG {
                s.util = 100.0;
                s.power_w = 140.0 + 20.0 * r(5);
            }
            if node == 1 && gpu == 2 {
                s.ecc_dbe = if t < 8 * H { 2.0 } else { 0.0 };
            }
            Scrape { pod, ..s }
        }
        _ => match gpu {
            6 if (2 * H..10 * H).contains(&t) => Scrape {
                mem_mib: 30_000.0,
                power_w: 75.0 + 3.0 * r(4),
                pod: Some(("research", "notebook-0".into(), "lab")),
                ..free(r(4))
            },
            6 => free(r(4)),
            7 => {
                let grown = ((t.clamp(12 * H, 20 * H) - 12 * H) as f64 / 60.0) * 40.0;
                Scrape {
                    mem_mib: 20_000.0 + grown + 20.0 * r(2),
                    pod: Some(("research", "leaky-0".into(), "main")),
                    ..busy(88.0)
                }
            }
            g => Scrape {
                mem_mib: 40_000.0 + 80.0 * r(2),
                power_w: 500.0 + 60.0 * r(3),
                ecc_dbe: match (g, t) {
                    (5, t) if t < 14 * H => 1.0,
                    (5, t) if t < 14 * H + 180 => 0.0,
                    (5, _) => 1.0,
                    _ => 0.0,
                },
                pod: Some(("research", format!("sweep-{g}"), "main")),
                ..busy(85.0)
            },
        },
    })
}

/// The day as OpenMetrics with second timestamps (promtool's backfill), or as the
/// Prometheus text format with millisecond timestamps (VictoriaMetrics' import).
fn exposition(t0: i64, millis: bool) -> String {
    let at = |t: i64| if millis { t * 1000 } else { t };
    let mut out = String::with_capacity(80 << 20);
    type Get = fn(&Scrape) -> f64;
    let families: [(&str, Get); 5] = [
        ("DCGM_FI_DEV_GPU_UTIL", |s| s.util.round()),
        ("DCGM_FI_DEV_FB_USED", |s| s.mem_mib.round()),
        ("DCGM_FI_DEV_POWER_USAGE", |s| {
            (s.power_w * 1000.0).round() / 1000.0
        }),
        ("DCGM_FI_DEV_GPU_TEMP", |s| s.temp.round()),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", |s| s.ecc_dbe),
    ];
    for (name, get) in families {
        let _ = writeln!(out, "# TYPE {name} gauge");
        for node in 1..=3 {
            for gpu in 0..8 {
                for i in 0..N {
                    let Some(s) = scrape(node, gpu, i) else {
                        continue;
                    };
                    let pod = s.pod.as_ref().map_or(String::new(), |(ns, p, c)| {
                        format!(",pod=\"{p}\",namespace=\"{ns}\",container=\"{c}\"")
                    });
                    let _ = writeln!(
                        out,
                        "{name}{{gpu=\"{gpu}\",UUID=\"{}\",device=\"nvidia{gpu}\",modelName=\"{MODEL}\",Hostname=\"node-{node}\"{pod}}} {} {}",
                        uuid(node, gpu),
                        get(&s),
                        at(t0 + i * STEP_S)
                    );
                }
            }
        }
    }
    // The job's own series, scraped from its pods (no host label: placed by pod).
    let _ = writeln!(out, "# TYPE training_step gauge");
    for rank in 0..2 {
        for i in 0..N {
            let t = (i * STEP_S).min(HANG);
            let _ = writeln!(
                out,
                "training_step{{job=\"llm\",namespace=\"ml\",pod=\"llm-{rank}\",instance=\"10.0.{rank}.7:8000\"}} {} {}",
                t / 10,
                at(t0 + i * STEP_S)
            );
        }
    }
    let _ = writeln!(out, "# TYPE training_loss gauge");
    for rank in 0..2 {
        for i in 0..N {
            let t = (i * STEP_S).min(HANG);
            let _ = writeln!(
                out,
                "training_loss{{job=\"llm\",namespace=\"ml\",pod=\"llm-{rank}\",instance=\"10.0.{rank}.7:8000\"}} {:.4} {}",
                2.0 + 8.0 / (1.0 + t as f64 / 3600.0),
                at(t0 + i * STEP_S)
            );
        }
    }
    if !millis {
        out.push_str("# EOF\n");
    }
    out
}

#[test]
fn a_day_of_three_nodes_imports_and_replays_to_the_right_gpus() {
    require_tools();
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("tsdb");
    std::fs::create_dir(&data).expect("mkdir");
    let t0 = (chrono::Utc::now().timestamp() - 27 * H) / H * H;
    backfill(dir.path(), "fleet.om", &exposition(t0, false), &data);
    let prom = Prometheus::start(dir.path(), &data);
    import_and_replay(dir.path(), &prom.url(), t0);
}

/// The same day in VictoriaMetrics, imported through its own API (no stale markers).
#[test]
fn the_same_day_from_victoria_metrics() {
    let dir = tempfile::tempdir().expect("tmp");
    let (_vm, port) = crate::import_prometheus::victoria_metrics(dir.path());
    let t0 = (chrono::Utc::now().timestamp() - 27 * H) / H * H;
    crate::import_prometheus::vm_import(port, &exposition(t0, true));
    let url = format!("http://127.0.0.1:{port}");
    // Ingested rows become searchable within a second or two: all 24 GPUs' newest hour.
    let probe = format!(
        "/api/v1/query?query=count(count_over_time(DCGM_FI_DEV_GPU_UTIL%5B1h%5D))&time={}",
        t0 + HOURS * H
    );
    crate::http_support::wait_for(
        "the rows searchable",
        std::time::Duration::from_secs(30),
        || {
            let (code, _, body) = crate::http_support::http_get(port, &probe, None, &[]);
            (code == 200 && body.contains("\"24\"")).then_some(())
        },
    );
    import_and_replay(dir.path(), &url, t0);
}

/// Imports the day from `url` and checks what lands and what replay says.
fn import_and_replay(dir: &std::path::Path, url: &str, t0: i64) {
    let db = dir.join("fleet.db");
    let db = db.to_str().expect("utf-8");
    let (from, to) = (t0.to_string(), (t0 + HOURS * H).to_string());
    let args = [
        "import",
        "prometheus",
        "--prometheus",
        url,
        "--from",
        &from,
        "--to",
        &to,
        "--db",
        db,
    ];
    let (code, out, err) = gpuwatch(&args);
    assert_eq!(code, 0, "{out}{err}");
    let rows = 24 * N - 6;
    assert!(
        out.starts_with(&format!(
            "imported {rows} samples of 24 GPUs on 3 host(s) (node-1, node-2, node-3)"
        )),
        "{out}"
    );
    assert!(out.contains("24 holder interval(s)"), "{out}");
    assert!(
        out.contains(&format!("{} training point(s)", 4 * N)),
        "{out}"
    );
    let conn = rusqlite::Connection::open(db).expect("db");
    assert_eq!(count(&conn, "SELECT count(*) FROM gpu_samples"), rows);
    // Pods as holders: one interval per GPU, the notebook's exactly its 8 hours.
    assert_eq!(count(&conn, "SELECT count(*) FROM gpu_allocations"), 24);
    assert_eq!(
        count(
            &conn,
            &format!(
                "SELECT to_ms - from_ms FROM gpu_allocations WHERE pod = 'notebook-0' AND gpu_uuid = '{}'",
                uuid(3, 6)
            )
        ),
        8 * H * 1000 - STEP_S * 1000 + 1
    );
    // The step series landed on the hosts of their pods.
    assert_eq!(
        count(
            &conn,
            "SELECT count(DISTINCT h.name) FROM training_series s JOIN hosts h ON h.id = s.host_id
             WHERE h.name IN ('node-1', 'node-2')"
        ),
        2
    );
    // The gap stays a gap.
    assert_eq!(
        count(
            &conn,
            &format!(
                "SELECT max(d) FROM (SELECT ts_ms - lag(ts_ms) OVER (ORDER BY ts_ms) AS d
                 FROM gpu_samples WHERE gpu_uuid = '{}')",
                uuid(2, 3)
            )
        ),
        (180 + STEP_S) * 1000
    );
    drop(conn);

    // The usage ledger of the imported day: the notebook's pod held its GPU idle 8 h.
    let (code, usage, err) = gpuwatch(&["usage", "--db", db, "--by", "pod", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let usage: serde_json::Value = serde_json::from_str(&usage).expect("json");
    let nb = usage["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| {
            r["key"]
                .as_str()
                .is_some_and(|k| k.ends_with("/notebook-0"))
        })
        .unwrap_or_else(|| panic!("{usage:#}"));
    let idle = nb["idle_held_hours"].as_f64().expect("hours");
    assert!((idle - 8.0).abs() <= 2.0 * STEP_S as f64 / 3600.0, "{nb}");
    assert_eq!(
        usage["rows"][0]["key"], nb["key"],
        "the most idle holder first"
    );

    // What gpuwatch would have said.
    let (code, replay, err) = gpuwatch(&["replay", "--db", db, "--format", "jsonl"]);
    assert!(code == 0 || code == 1, "{err}");
    let fired: Vec<serde_json::Value> = replay
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["state"] == "firing")
        .collect();
    let got: BTreeSet<(String, String, String)> = fired
        .iter()
        .map(|v| {
            (
                v["rule"].as_str().unwrap_or("").to_string(),
                v["host"].as_str().unwrap_or("").to_string(),
                v["uuid"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let mut want: BTreeSet<(String, String, String)> = BTreeSet::new();
    let mut add = |rule: &str, node: usize, gpu: usize| {
        want.insert((rule.into(), format!("node-{node}"), uuid(node, gpu)));
    };
    add("gpu_idle", 3, 6);
    add("gpu_memory_leak", 3, 7);
    add("gpu_ecc_uncorrected", 3, 5);
    for node in 1..=2 {
        for gpu in 0..8 {
            add("training_hang", node, gpu);
        }
    }
    assert_eq!(got, want, "{replay}");
    // When: the hang within 5 minutes of the step stopping; the idle GPU with its pod.
    let at = |v: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(v["at"].as_str().unwrap_or(""))
            .map_or(0, |t| t.timestamp())
    };
    let hang = fired
        .iter()
        .filter(|v| v["rule"] == "training_hang")
        .map(at)
        .min()
        .unwrap_or(0);
    assert!(
        (t0 + HANG..t0 + HANG + 300).contains(&hang),
        "hang reported {} s after the step stopped",
        hang - t0 - HANG
    );
    let idle = fired
        .iter()
        .find(|v| v["rule"] == "gpu_idle")
        .expect("idle");
    assert_eq!(idle["labels"]["pod"], "notebook-0", "{idle}");
    assert!((t0 + 2 * H..t0 + 3 * H).contains(&at(idle)), "{idle}");

    // A re-run imports nothing twice.
    let (code, out, err) = gpuwatch(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("imported 0 samples"), "{out}");
    let conn = rusqlite::Connection::open(db).expect("db");
    assert_eq!(count(&conn, "SELECT count(*) FROM gpu_samples"), rows);
    assert_eq!(count(&conn, "SELECT count(*) FROM gpu_allocations"), 24);
    assert_eq!(count(&conn, "SELECT count(*) FROM training_samples"), 4 * N);
}
