//! The HTTP listener of a real `gpuwatch run` on simulated GPUs: `/metrics` in
//! dcgm-exporter's names (checked by promtool) and in gpuwatch's, the JSON API against the
//! CLI's `--format json`, the token beyond loopback, and the live page in headless Chromium.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::attribution_support;
use crate::browser_support::browse;
use crate::http_support;
use crate::http_support::{Node, promtool_lint, series_value, wait_for};
use crate::training_support;

/// Scrapes until the hot GPU's alert fires (the rules thread has evaluated).
fn scrape_when_firing(node: &Node, token: Option<&str>) -> String {
    wait_for("gpuwatch_alert{hot}", Duration::from_secs(30), || {
        let (code, _, body) = node.get("/metrics", token);
        (code == 200
            && series_value(
                &body,
                "gpuwatch_alert",
                &[("alertname", "hot"), ("state", "firing")],
            )
            .is_some()
            && series_value(
                &body,
                "gpuwatch_alert",
                &[("alertname", "idle"), ("state", "firing")],
            )
            .is_some())
        .then_some(body)
    })
}

#[test]
fn metrics_speak_dcgm_exporter_and_only_its_names_draw_lint() {
    let node = Node::new("node-1", 1, "", "");
    let _d = node.start(&[]);
    let m = scrape_when_firing(&node, None);
    let (_, ctype, _) = node.get("/metrics", None);
    assert_eq!(ctype, "text/plain; version=0.0.4; charset=utf-8");

    let status: Value =
        serde_json::from_str(&node.cli(&["status", "--format", "json"])).expect("status");
    let uuid0 = status["gpus"][0]["uuid"]
        .as_str()
        .expect("uuid")
        .to_string();
    let gpu0 = [
        ("gpu", "0"),
        ("UUID", uuid0.as_str()),
        ("device", "nvidia0"),
        ("modelName", "NVIDIA H100 80GB HBM3"),
        ("Hostname", "node-1"),
    ];
    assert_eq!(
        series_value(&m, "DCGM_FI_DEV_GPU_TEMP", &gpu0),
        Some(85.0),
        "{m}"
    );
    assert_eq!(series_value(&m, "DCGM_FI_DEV_GPU_UTIL", &gpu0), Some(90.0));
    // A real 0 is 0.
    assert_eq!(
        series_value(&m, "DCGM_FI_DEV_GPU_UTIL", &[("gpu", "1")]),
        Some(0.0)
    );
    // MiB, as dcgm-exporter: the 20000 MiB process plus the driver's baseline.
    let fb = series_value(&m, "DCGM_FI_DEV_FB_USED", &gpu0).expect("FB_USED");
    assert!((20_000.0..21_000.0).contains(&fb), "{fb}");
    // Whole MiB, as dcgm-exporter's integer fields (the driver's baseline is not).
    for name in ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"] {
        let v = series_value(&m, name, &gpu0).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(v.fract(), 0.0, "{name} {v}");
    }
    // Watts; GPU 1 cannot read its power: absent, never 0. H100 SXM has no fan: absent.
    assert!(series_value(&m, "DCGM_FI_DEV_POWER_USAGE", &gpu0).is_some_and(|w| w > 50.0));
    assert_eq!(
        series_value(&m, "DCGM_FI_DEV_POWER_USAGE", &[("gpu", "1")]),
        None,
        "{m}"
    );
    assert!(!m.contains("DCGM_FI_DEV_FAN_SPEED{"), "{m}");
    assert!(m.contains("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"));
    assert!(
        series_value(&m, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", &gpu0).is_some_and(|mj| mj > 0.0)
    );
    // GPM's activity as dcgm-exporter's profiling ratios (from a GPU's second sample: GPM
    // measures between two): a busy GPU's SMs work, an idle GPU's are a real 0.
    let m = wait_for("DCGM_FI_PROF_SM_ACTIVE", Duration::from_secs(30), || {
        let (_, _, body) = node.get("/metrics", None);
        series_value(&body, "DCGM_FI_PROF_SM_ACTIVE", &[("gpu", "1")]).map(|_| body)
    });
    for (name, lo, hi) in [
        ("DCGM_FI_PROF_SM_ACTIVE", 0.6, 0.85),
        ("DCGM_FI_PROF_SM_OCCUPANCY", 0.2, 0.45),
        ("DCGM_FI_PROF_DRAM_ACTIVE", 0.25, 0.5),
    ] {
        let v = series_value(&m, name, &gpu0).unwrap_or_else(|| panic!("{name}: {m}"));
        assert!((lo..=hi).contains(&v), "{name} {v}");
        assert_eq!(series_value(&m, name, &[("gpu", "1")]), Some(0.0), "{name}");
        assert!(m.contains(&format!("# TYPE {name} gauge\n")), "{name}");
    }
    // XIDs are watched and none happened.
    assert_eq!(series_value(&m, "DCGM_FI_DEV_XID_ERRORS", &gpu0), Some(0.0));
    let driver = status["gpus"][0]["driver_version"]
        .as_str()
        .expect("driver");
    assert!(m.contains(&format!("DCGM_FI_DRIVER_VERSION=\"{driver}\"")));

    // What only gpuwatch has.
    let hot = [
        ("alertname", "hot"),
        ("state", "firing"),
        ("severity", "critical"),
        ("gpu", "0"),
        ("UUID", uuid0.as_str()),
    ];
    assert_eq!(series_value(&m, "gpuwatch_alert", &hot), Some(1.0), "{m}");
    assert_eq!(
        series_value(
            &m,
            "gpuwatch_alert",
            &[("alertname", "warm"), ("state", "pending")]
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        series_value(&m, "gpuwatch_gpu_processes", &[("gpu", "0")]),
        Some(1.0)
    );
    assert_eq!(
        series_value(&m, "gpuwatch_gpu_up", &[("gpu", "1")]),
        Some(1.0)
    );
    assert_eq!(series_value(&m, "gpuwatch_gpus", &[]), Some(2.0));
    // NOT_SUPPORTED is not an error: nothing failed.
    assert!(!m.contains("gpuwatch_nvml_errors_total{"), "{m}");
    assert!(series_value(&m, "gpuwatch_ticks_total", &[]).is_some_and(|n| n >= 1.0));
    assert!(
        series_value(&m, "gpuwatch_tick_duration_seconds_count", &[]).is_some_and(|n| n >= 1.0)
    );
    assert!(
        series_value(&m, "gpuwatch_rule_evaluation_duration_seconds_count", &[])
            .is_some_and(|n| n >= 1.0)
    );
    assert!(series_value(&m, "gpuwatch_database_used_bytes", &[]).is_some_and(|n| n > 0.0));
    assert!(series_value(&m, "gpuwatch_rule_window_bytes", &[]).is_some_and(|n| n > 0.0));
    assert!(series_value(&m, "gpuwatch_sqlite_memory_bytes", &[]).is_some_and(|n| n > 0.0));

    // promtool: only dcgm-exporter's own names and labels draw lint (modelName, counters
    // without _total), exactly as they do from dcgm-exporter; gpuwatch_* are clean.
    let lint = promtool_lint(&m);
    assert!(
        !lint.is_empty(),
        "dcgm-exporter's names do draw promtool's lint"
    );
    for l in &lint {
        assert!(
            l.starts_with("DCGM_FI_")
                && (l.ends_with("label names should be written in 'snake_case' not 'camelCase'")
                    || l.ends_with("counter metrics should have \"_total\" suffix")),
            "unexpected lint: {l}\n{}",
            lint.join("\n")
        );
    }

    // OpenMetrics when asked for (as Prometheus asks).
    let (code, ctype, om) = node.get_with(
        "/metrics",
        None,
        &[(
            "Accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        )],
    );
    assert_eq!(code, 200);
    assert!(
        ctype.starts_with("application/openmetrics-text; version=1.0.0"),
        "{ctype}"
    );
    assert!(om.ends_with("# EOF\n"));
    assert!(om.contains("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown\n"));
    assert!(
        om.contains("# TYPE gpuwatch_ticks counter\n") && om.contains("\ngpuwatch_ticks_total ")
    );
}

#[test]
fn gpuwatch_names_are_base_units_and_lint_clean() {
    let node = Node::new("node-2", 2, "metrics_names = \"gpuwatch\"", "");
    let _d = node.start(&[]);
    let m = scrape_when_firing(&node, None);
    assert!(!m.contains("DCGM_FI_"), "{m}");
    assert_eq!(
        series_value(
            &m,
            "gpuwatch_gpu_temperature_celsius",
            &[("gpu", "0"), ("host", "node-2")]
        ),
        Some(85.0)
    );
    assert_eq!(
        series_value(&m, "gpuwatch_gpu_utilization_ratio", &[("gpu", "0")]),
        Some(0.9)
    );
    let bytes = series_value(&m, "gpuwatch_gpu_memory_used_bytes", &[("gpu", "0")]).expect("bytes");
    assert!(bytes > 20_000.0 * 1024.0 * 1024.0, "{bytes}");
    assert!(m.contains("# TYPE gpuwatch_gpu_energy_joules_total counter\n"));
    assert_eq!(
        series_value(&m, "gpuwatch_alert", &[("alertname", "hot"), ("uuid", "")]),
        None
    );
    let lint = promtool_lint(&m);
    assert!(lint.is_empty(), "gpuwatch's names are lint-clean: {lint:?}");
}

/// Removes, at any depth, the keys whose values move from one evaluation to the next.
fn without(mut v: Value, keys: &[&str]) -> Value {
    match &mut v {
        Value::Object(o) => {
            for k in keys {
                o.remove(*k);
            }
            for x in o.values_mut() {
                *x = without(x.take(), keys);
            }
        }
        Value::Array(a) => {
            for x in a.iter_mut() {
                *x = without(x.take(), keys);
            }
        }
        _ => {}
    }
    v
}

#[test]
fn the_api_serves_the_clis_json_documents() {
    let node = Node::new("node-3", 3, "", "");
    let _d = node.start(&[]);
    scrape_when_firing(&node, None);

    let (code, ctype, body) = node.get("/api/v1/status", None);
    assert_eq!((code, ctype.as_str()), (200, "application/json"), "{body}");
    let api: Value = serde_json::from_str(&body).expect("json");
    let cli: Value =
        serde_json::from_str(&node.cli(&["status", "--format", "json"])).expect("json");
    let moving = ["age_ms", "sample_ts_ms", "count", "last_ms"];
    assert_eq!(without(api.clone(), &moving), without(cli, &moving));
    assert_eq!(api["gpus"].as_array().map(Vec::len), Some(2), "{api}");
    assert_eq!(api["gpus"][0]["processes"][0]["pid"], 4000100);

    let (code, _, body) = node.get("/api/v1/alerts?since=1h", None);
    assert_eq!(code, 200, "{body}");
    let api: Value = serde_json::from_str(&body).expect("json");
    let cli: Value =
        serde_json::from_str(&node.cli(&["alerts", "--since", "1h", "--format", "json"]))
            .expect("json");
    let moving = ["active_ms", "firing_ms", "pending_ms"];
    assert_eq!(without(api.clone(), &moving), without(cli, &moving));
    let rules: Vec<&str> = api
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|a| a["rule"].as_str())
        .collect();
    for r in ["hot", "idle", "warm"] {
        assert!(rules.contains(&r), "{rules:?}");
    }
    let (_, _, firing) = node.get("/api/v1/alerts?state=firing&rule=hot", None);
    let firing: Value = serde_json::from_str(&firing).expect("json");
    assert_eq!(firing.as_array().map(Vec::len), Some(1), "{firing}");

    // A fixed past range that holds the first samples: the same document, byte for byte.
    let first: Value = serde_json::from_str(&node.cli(&[
        "query",
        "--format",
        "json",
        "SELECT min(ts_ms) AS t FROM samples",
    ]))
    .expect("json");
    let to = first[0]["t"].as_i64().expect("a first sample") / 1000 + 1;
    let from = to - 60;
    let q = format!("/api/v1/history?gpu=0&metric=temp,util&from={from}&to={to}&step=1s");
    let (code, _, api) = node.get(&q, None);
    assert_eq!(code, 200, "{api}");
    let cli = node.cli(&[
        "history",
        "--gpu",
        "0",
        "--metric",
        "temp,util",
        "--from",
        &from.to_string(),
        "--to",
        &to.to_string(),
        "--step",
        "1s",
        "--format",
        "json",
    ]);
    assert_eq!(api, cli);
    let h: Value = serde_json::from_str(&api).expect("json");
    assert_eq!(h["series"].as_array().map(Vec::len), Some(2), "{h}");

    // Parameters are the commands' flags, checked by their parser; nothing else passes.
    for (path, says) in [
        ("/api/v1/alerts?state=burning", "burning"),
        (
            "/api/v1/alerts?config=/etc/passwd",
            "unknown parameter \\\"config\\\"",
        ),
        ("/api/v1/history?metric=nonsense", "nonsense"),
        ("/api/v1/history?since=soon", "soon"),
    ] {
        let (code, ctype, body) = node.get(path, None);
        assert_eq!(
            (code, ctype.as_str()),
            (400, "application/json"),
            "{path}: {body}"
        );
        assert!(body.contains(says), "{path}: {body}");
    }
}

#[test]
fn beyond_loopback_every_route_but_health_needs_the_token() {
    // Refused at load: no token for a public listener.
    let open = Node::new("node-4", 4, "", "");
    let cfg = std::fs::read_to_string(&open.cfg)
        .expect("cfg")
        .replace("listen = \"127.0.0.1:", "listen = \"0.0.0.0:");
    std::fs::write(&open.cfg, cfg).expect("cfg");
    let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args(["run", "--config"])
        .arg(&open.cfg)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("g.toml:") && err.contains("without a token") && err.contains("token_env"),
        "{err}"
    );

    let node = Node::new("node-5", 5, "token_env = \"GPUWATCH_TEST_TOKEN\"", "");
    let cfg = std::fs::read_to_string(&node.cfg)
        .expect("cfg")
        .replace("listen = \"127.0.0.1:", "listen = \"0.0.0.0:");
    std::fs::write(&node.cfg, cfg).expect("cfg");
    // The variable is missing: the daemon does not start with a listener it cannot check.
    let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .env_remove("GPUWATCH_TEST_TOKEN")
        .args(["run", "--config"])
        .arg(&node.cfg)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("GPUWATCH_TEST_TOKEN"),
        "{err}"
    );

    let token = "t0k3n-for-the-test-only";
    let _d = node.start(&[("GPUWATCH_TEST_TOKEN", token)]);
    scrape_when_firing(&node, Some(token));
    assert_eq!(node.get("/healthz", None).0, 200);
    assert_eq!(node.get("/", None).0, 200, "the page's HTML holds no data");
    for path in [
        "/metrics",
        "/api/v1/status",
        "/api/v1/alerts",
        "/api/v1/history?since=5m",
        "/api/v1/gpu/audit?since=1h",
    ] {
        let (code, _, body) = node.get(path, None);
        assert_eq!(code, 401, "{path}: {body}");
        assert_eq!(node.get(path, Some("wrong-token-wrong")).0, 401, "{path}");
        let (code, _, body) = node.get(path, Some(token));
        assert_eq!(code, 200, "{path}: {body}");
    }
    assert!(!node.log().contains(token), "the token is never logged");

    // public_metrics: Prometheus may scrape without it; the API still needs it.
    let public = Node::new(
        "node-6",
        6,
        "token_env = \"GPUWATCH_TEST_TOKEN\"\npublic_metrics = true",
        "",
    );
    let _p = public.start(&[("GPUWATCH_TEST_TOKEN", token)]);
    assert_eq!(public.get("/metrics", None).0, 200);
    assert_eq!(public.get("/api/v1/status", None).0, 401);
}

/// The demo's page shows what only gpuwatch knows, beside each GPU: the job, its step, steps
/// per minute and loss, and the pod; its charts draw from the first minutes (raw samples
/// before the hour has a minute's rollups), memory labelled in the unit shown.
#[test]
fn the_demo_page_joins_training_progress_and_pods_to_each_gpu() {
    let dir = tempfile::tempdir().expect("tmp");
    let (_demo, port) = start_demo(dir.path(), "20m");
    wait_for(
        "the llama job's steps per minute",
        Duration::from_secs(60),
        || {
            let (_, _, body) = http_support::http_get(port, "/api/v1/status", None, &[]);
            let v: Value = serde_json::from_str(&body).ok()?;
            v["gpus"][0]["training"]["steps_per_minute"]
                .as_f64()
                .filter(|r| *r > 0.0)
        },
    );
    let url = format!("http://127.0.0.1:{port}/");
    let dom = browse(&url, &dir.path().join("profile"), &["--dump-dom"]);
    assert!(dom.contains("data-ready=\"1\""), "{dom}");
    for want in [
        "llama-70b-ft",
        "pod research/llama-70b-ft-0",
        "steps/min",
        ">loss<",
        "resnet-sweep",
        "memory GiB",
    ] {
        assert!(dom.contains(want), "{want} on the page: {dom}");
    }
    assert!(!dom.contains("memory MiB"), "{dom}");
    assert!(!dom.contains("STALE"), "{dom}");
    assert!(dom.contains("<path d=\"M"), "the charts draw: {dom}");
}

#[test]
fn the_live_page_renders_gpus_and_alerts_in_chromium() {
    let node = Node::new("node-7", 7, "", "");
    let _d = node.start(&[]);
    scrape_when_firing(&node, None);
    // A few seconds of samples, the first minutes the charts must draw.
    wait_for("three seconds of samples", Duration::from_secs(30), || {
        let (_, _, body) = node.get(
            "/api/v1/history?since=5m&step=1s&source=raw&metric=util_gpu&gpu=0",
            None,
        );
        let v: Value = serde_json::from_str(&body).ok()?;
        let points = v["series"][0]["points"].as_array()?;
        (points.iter().filter(|p| !p["avg"].is_null()).count() >= 3).then_some(())
    });
    let url = format!("http://127.0.0.1:{}/", node.port);
    let profile = node.path("chromium-profile");
    let run = |extra: &[&str]| browse(&url, &profile, extra);
    let dom = run(&["--dump-dom"]);
    let status: Value =
        serde_json::from_str(&node.cli(&["status", "--format", "json"])).expect("status");
    assert!(
        dom.contains("data-ready=\"1\""),
        "the page loaded its data: {dom}"
    );
    for g in status["gpus"].as_array().expect("gpus") {
        let uuid = g["uuid"].as_str().expect("uuid");
        assert!(
            dom.contains(&format!("data-uuid=\"{uuid}\"")),
            "GPU {uuid} rendered: {dom}"
        );
    }
    assert!(
        dom.contains("<b>hot</b>") && dom.contains("GPU 0 is hot"),
        "the firing alert: {dom}"
    );
    assert!(dom.contains("class=\"alert critical firing\""), "{dom}");
    assert!(
        dom.contains("85°C") && dom.contains("pid 4000100"),
        "GPU 0's temperature and holder: {dom}"
    );
    // A daemon seconds old: the charts draw its raw samples, not empty boxes.
    assert!(dom.contains("<path d=\"M"), "the charts draw: {dom}");
    assert!(
        dom.contains("· 5 min") && dom.contains("memory GiB"),
        "{dom}"
    );
    let shot = node.path("page.png");
    run(&[&format!("--screenshot={}", shot.display())]);
    let png = std::fs::read(&shot).expect("screenshot");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
}

/// `gpuwatch demo --listen` at its default speed: its samples carry the scenario's clock,
/// which runs 30x faster than the wall clock, and freshness is judged on that clock, so the
/// first scrape a newcomer makes shows dcgm-exporter's series with every GPU up, and
/// `/healthz`, `/api/v1/status` (the page's source) and `/metrics` agree.
/// `gpuwatch demo --listen` at its default speed on a free port, for `duration` of scenario.
fn start_demo(dir: &std::path::Path, duration: &str) -> (http_support::Daemon, u16) {
    let port = http_support::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args(["demo", "--duration", duration, "--every", "1h", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--db")
        .arg(dir.join("demo.db"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("demo");
    (http_support::Daemon(child), port)
}

#[test]
fn the_demo_serves_fresh_gpus_on_its_own_clock() {
    let dir = tempfile::tempdir().expect("tmp");
    let (_demo, port) = start_demo(dir.path(), "20m");
    let get = |path: &str| http_support::http_get(port, path, None, &[]);
    let gpus = wait_for(
        "the demo's four GPUs sampled",
        Duration::from_secs(60),
        || {
            let (code, _, body) = get("/api/v1/status");
            let v: Value = serde_json::from_str(&body).ok()?;
            let gpus = v["gpus"].as_array()?.clone();
            (code == 200 && gpus.len() == 4 && gpus.iter().all(|g| g["sample_ts_ms"].is_i64()))
                .then_some(gpus)
        },
    );
    let indexes: Vec<String> = gpus.iter().map(|g| g["index"].to_string()).collect();
    let (code, _, scrape) = get("/metrics");
    assert_eq!(code, 200);
    for i in &indexes {
        assert!(
            series_value(&scrape, "DCGM_FI_DEV_GPU_UTIL", &[("gpu", i)]).is_some(),
            "GPU {i}'s utilisation on the first scrape: {scrape}"
        );
        assert_eq!(
            series_value(&scrape, "gpuwatch_gpu_up", &[("gpu", i)]),
            Some(1.0),
            "GPU {i} up: {scrape}"
        );
        // dcgm-exporter's framebuffer values are whole MiB.
        for name in ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"] {
            let v = series_value(&scrape, name, &[("gpu", i)]).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(v.fract(), 0.0, "GPU {i}'s {name} {v}");
        }
    }
    // Over a couple of seconds (a minute of the scenario), every view keeps saying fresh.
    for _ in 0..10 {
        let (code, _, health) = get("/healthz");
        assert!(
            code == 200 && health.contains("\"status\":\"ok\""),
            "{health}"
        );
        let (_, _, body) = get("/api/v1/status");
        let v: Value = serde_json::from_str(&body).expect("status json");
        for g in v["gpus"].as_array().expect("gpus") {
            let state = g["state"].as_array().expect("state");
            assert!(
                !state.contains(&Value::from("STALE")),
                "GPU {} stale: {g}",
                g["index"]
            );
            let reasons = g["health"]["reasons"].to_string();
            assert!(!reasons.contains("stale"), "GPU {}: {reasons}", g["index"]);
        }
        let (_, _, scrape) = get("/metrics");
        for i in &indexes {
            assert_eq!(
                series_value(&scrape, "gpuwatch_gpu_up", &[("gpu", i)]),
                Some(1.0),
                "GPU {i} up: {scrape}"
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_listener_serves_https_with_its_certificate() {
    let dir = tempfile::tempdir().expect("tmp");
    let (ca, cert, key) = training_support::make_certs(dir.path());
    let tls = format!(
        "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\ntoken_env = \"GPUWATCH_TLS_TOKEN\"",
        cert.display(),
        key.display()
    );
    let node = Node::new("node-8", 8, &tls, "");
    let cfg = std::fs::read_to_string(&node.cfg)
        .expect("cfg")
        .replace("listen = \"127.0.0.1:", "listen = \"0.0.0.0:");
    std::fs::write(&node.cfg, cfg).expect("cfg");
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuwatch"));
    c.env("GPUWATCH_TLS_TOKEN", "tls-test-token-123")
        .args(["run", "--config"])
        .arg(&node.cfg)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(node.path("run.log")).expect("log"));
    let d = http_support::Daemon(c.spawn().expect("spawn"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let pem = std::fs::read(&ca).expect("ca");
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("pem"))
        .build()
        .expect("client");
    let url = |p: &str| format!("https://127.0.0.1:{}{p}", node.port);
    let get = |p: &str, token: Option<&str>| {
        rt.block_on(async {
            let mut r = client.get(url(p));
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            match r.send().await {
                Ok(resp) => (
                    resp.status().as_u16(),
                    resp.text().await.unwrap_or_default(),
                ),
                Err(_) => (0, String::new()),
            }
        })
    };
    wait_for("HTTPS /healthz", Duration::from_secs(30), || {
        (get("/healthz", None).0 == 200).then_some(())
    });
    assert_eq!(get("/api/v1/status", None).0, 401);
    let (code, body) = get("/metrics", Some("tls-test-token-123"));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("gpuwatch_build_info"), "{body}");
    // Plain HTTP on the TLS port gets no answer.
    assert_eq!(
        node.get("/healthz", None).0,
        0,
        "no plain HTTP on an HTTPS listener"
    );
    // A bad key is a clear start-up error.
    drop(d);
    std::fs::write(&key, "not a key\n").expect("key");
    let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .env("GPUWATCH_TLS_TOKEN", "x-token-x")
        .args(["run", "--config"])
        .arg(&node.cfg)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("TLS key") && err.contains("tls_key_file"),
        "{err}"
    );
}

#[test]
fn gpu_series_carry_the_pod_the_kubelet_allocated() {
    let uuid = http_support::uuid(9, 0);
    let kubelet = gpuwatch::sim::SimKubelet::serve(attribution_support::allocations(&[(
        "llm-ft-7", "research", &uuid,
    )]))
    .expect("kubelet");
    let sock = kubelet.socket.clone();
    let node = Node::new(
        "node-9",
        9,
        "",
        &format!(
            "[kubernetes]\nenabled = true\npod_resources_socket = \"{}\"\n",
            sock.display()
        ),
    );
    let _d = node.start(&[]);
    let m = scrape_when_firing(&node, None);
    let pod = [
        ("gpu", "0"),
        ("pod", "llm-ft-7"),
        ("namespace", "research"),
        ("container", "trainer"),
    ];
    assert_eq!(
        series_value(&m, "DCGM_FI_DEV_GPU_TEMP", &pod),
        Some(85.0),
        "{m}"
    );
    assert!(series_value(&m, "gpuwatch_gpu_up", &pod).is_some(), "{m}");
    assert!(
        series_value(
            &m,
            "gpuwatch_alert",
            &[
                ("alertname", "hot"),
                ("pod", "llm-ft-7"),
                ("namespace", "research")
            ]
        )
        .is_some(),
        "{m}"
    );
    // GPU 1 has no allocation and no process: no pod label, not an empty one.
    let gpu1 = m
        .lines()
        .find(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP{gpu=\"1\""))
        .expect("GPU 1");
    assert!(!gpu1.contains("pod="), "{gpu1}");
    drop(kubelet);
}

#[test]
fn a_hung_gpu_does_not_hold_up_a_scrape() {
    // From 6 s on, every NVML call on GPU 1 never returns.
    let node = Node::with_scenario(
        "node-10",
        10,
        "",
        "",
        "[[fault]]\ngpu = 1\nsymbol = \"*\"\nfrom = \"6s\"\nblock = \"forever\"\n",
    );
    let _d = node.start(&[]);
    scrape_when_firing(&node, None);
    let m = wait_for(
        "GPU 1 to miss its deadlines",
        Duration::from_secs(30),
        || {
            let (_, _, m) = node.get("/metrics", None);
            (series_value(&m, "gpuwatch_gpu_up", &[("gpu", "1")]) == Some(0.0)).then_some(m)
        },
    );
    // GPU 1's readings are gone (a gap, not stale values), GPU 0's go on.
    assert_eq!(
        series_value(&m, "DCGM_FI_DEV_GPU_TEMP", &[("gpu", "1")]),
        None,
        "{m}"
    );
    assert_eq!(
        series_value(&m, "DCGM_FI_DEV_GPU_TEMP", &[("gpu", "0")]),
        Some(85.0),
        "{m}"
    );
    assert!(
        series_value(&m, "gpuwatch_sample_deadlines_missed_total", &[]).is_some_and(|n| n >= 1.0),
        "{m}"
    );
    // Scrapes, the API and the health check answer at once while NVML hangs.
    for _ in 0..10 {
        for path in ["/metrics", "/api/v1/status", "/healthz"] {
            let t = std::time::Instant::now();
            let (code, _, _) = node.get(path, None);
            assert_eq!(code, 200, "{path}");
            assert!(
                t.elapsed() < Duration::from_secs(1),
                "{path} took {:?}",
                t.elapsed()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
